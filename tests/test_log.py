"""dtfkit's own notes go through the "dtfkit" logger: shown by default where they were printed before,
silenced by its level, routed by its handlers (issue 42)."""

from __future__ import annotations

import logging

import pytest

from dtfkit import log


@pytest.fixture
def dtfkit_logger():
    logger = logging.getLogger("dtfkit")
    saved = (logger.level, list(logger.handlers), logger.propagate)
    yield logger
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]
    logger.propagate = saved[2]


def test_a_note_is_shown_on_standard_output_by_default(dtfkit_logger, capsys):
    log.note("dtfkit: started again: worker:0 (exited)")
    out, err = capsys.readouterr()
    assert out == "dtfkit: started again: worker:0 (exited)\n"
    assert err == ""


def test_the_loggers_level_silences_the_notes(dtfkit_logger, capsys):
    dtfkit_logger.setLevel(logging.WARNING)
    log.note("dtfkit: closed the cluster this cell started before (c1)")
    assert capsys.readouterr().out == ""


def test_the_notes_can_be_routed_to_pythons_logging(dtfkit_logger, capsys, caplog):
    dtfkit_logger.handlers[:] = []
    dtfkit_logger.propagate = True
    with caplog.at_level(logging.INFO, logger="dtfkit"):
        log.note("dtfkit: the cluster was closed; started it again (c2, new addresses)")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("dtfkit", logging.INFO, "dtfkit: the cluster was closed; started it again (c2, new addresses)")
    ]
    assert capsys.readouterr().out == ""


def test_a_running_cluster_says_it_started_a_task_again_through_the_logger(cluster, dtfkit_logger, caplog):
    """The real path: a killed task is started again by ensure_running, and the note is a log record."""
    dtfkit_logger.handlers[:] = []
    dtfkit_logger.propagate = True
    cluster.kill("worker", 1)
    with caplog.at_level(logging.INFO, logger="dtfkit"):
        assert cluster.ensure_running() == ["worker:1"]
    notes = [r.getMessage() for r in caplog.records if r.name == "dtfkit"]
    assert len(notes) == 1 and notes[0].startswith("dtfkit: started again: worker:1"), notes
