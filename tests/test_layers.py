"""The coordinator's rooms stay layered: no import loops, and no import of a higher layer."""

from tests import layers


def test_no_coordinator_module_imports_a_higher_layer() -> None:
    assert layers.upward(layers.edges()) == []


def test_no_import_loops_between_coordinator_modules() -> None:
    assert layers.loops(layers.edges()) == []


def test_the_checker_sees_an_upward_import_and_a_loop() -> None:
    # The checks above could pass by seeing nothing; these edges are what they must catch.
    storage_imports_service = layers.Edge("storage.job_rows", "service")
    assert layers.upward([storage_imports_service]) == [storage_imports_service]
    loop = [layers.Edge("jobs.results", "jobs.submission"), layers.Edge("jobs.submission", "jobs.results")]
    assert layers.loops(loop) == [("jobs.results", "jobs.submission")]
    assert len(layers.edges()) > 300  # the real graph was read


def test_the_coordinator_and_the_cli_use_the_ledger_through_its_api_only() -> None:
    assert layers.ledger_imports_past_api() == []
    # The check could pass by reading nothing: the tests, which reach inside, must show up.
    assert any("imports ledger.storage" in line for line in layers.ledger_imports_past_api(("tests",)))


def test_only_ledger_storage_builds_sql() -> None:
    assert layers.ledger_sql_outside_storage() == []
    # What the check reads: the storage's own imports of SQLAlchemy are seen (and allowed there).
    store_imports = layers.imported_names(layers.ROOT / "ledger" / "storage" / "store.py")
    assert ("sqlalchemy", "select") in store_imports
