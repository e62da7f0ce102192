"""Proof of completion: sampled replay checks of finished jobs, trust, and their consequences.

    tolerances.py  how far an honest replay may stray (calibrated by bench/calibrate_tolerances.py)
    tokens.py      pure: was each output token what the seeded sampler picks from the replayed logits?
    judge.py       pure: a receipt's activation commitment and tokens against a replay -> CheckVerdict
    economics.py   pure: held credits as stake; the check rate a job's stake calls for, the window
                   floor, forfeits and claw-backs, and the expected profit of a cheat (< 0); the
                   checker's fee and the planting rate that makes a lazy checker lose money
    policy.py      pure: a node's record -> chance it cheats, share of its jobs checked, quarantine
    store.py       SQL edge for check records and node trust
    outcomes.py    use cases in the caller's transaction: open a check, record a verdict, release credits
    stakes.py      a failed check takes the node's stake: held credits forfeited, posted ones clawed back
    peers.py       pure: who checks a job (and who referees a dispute), rulings, the check fee
    checker_pool.py pure: a dispatch pass's draw of checkers, as peers.py chooses, without a
                   filter over the whole fleet per check
    peer_store.py  SQL edge for check jobs run by peers (real and planted)
    peer_checks.py check jobs for peers in the caller's transaction: hand over, judge, dispute, pay
    planted.py     planted checks: claims built to fail any honest replay, catching lazy checkers
    isolated.py    checkers: a replay in this process (tests), or in a child process that a crash costs
    worker.py      the verifier worker: replays waiting checks with an injected Checker; a replay
                   that crashed or gave no verdict escalates to a peer (or is quarantined), its
                   credit held
"""
