"""Pods: Macs cabled together and run as one unit with MLX's distributed engine (mlx.launch).

    proposal.py   propose a pod from the Thunderbolt peers each Mac sees (pure)
    runner.py     run one pod job over mlx.launch and check every rank's result
    outcome.py    how a pod run ends (PodJobResult), and the runner's signature
    leader.py     the leader's whole pod job: the run, then its reports
"""
