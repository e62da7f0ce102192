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
