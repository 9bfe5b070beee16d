"""A nightly's pipelines are threads of one process that take turns on the catalog's lock: one waiting for another
is not a stall, and says nothing (the waiter names *other* processes only: tests/e2e/test_stoppable_queries.py)."""

from __future__ import annotations

import fcntl
import logging
import threading

from storage.catalog_io import lock


def test_a_thread_waiting_for_another_thread_of_its_process_says_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(lock, "SAY_AFTER_S", 0.05)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock.catalog_lock(tmp_path, fcntl.LOCK_EX, timeout_s=10):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    threading.Timer(0.5, release.set).start()  # the waiter waits ~0.5 s, ten times SAY_AFTER_S
    with caplog.at_level(logging.WARNING), lock.catalog_lock(tmp_path, fcntl.LOCK_EX, timeout_s=10):
        pass
    holder.join()
    assert [r.getMessage() for r in caplog.records if "catalog lock" in r.getMessage()] == []
    assert lock.others_hold(tmp_path) is True  # none noted now: an older augdag's lock would be news
