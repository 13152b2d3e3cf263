"""A `fim worker` writes a job's end only while the job is still its own.

procrastinate ends a job (`finish_job`) or queues it again (`retry_job`) by its id and
status alone. A worker whose store hung (not refusing: its packets held up) cuts its job
once no heartbeat lands (`worker_watch.Lease`) and sends the job's end into that hung
connection; the stalled-job retry of another worker then hands the job on, and the held
write landing afterwards ended the other worker's run of it under it (`succeeded` while it
still ran), or queued it a third time (`retry_job_v2` also takes a `failed` job). Here each
write names the worker that fetched the job (`Job.worker_id`, set by the fetch) and locks
the row in the same statement: a job another worker has taken is left as it is, one line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datetime

    import procrastinate
    from procrastinate.jobs import Job, Status

log = logging.getLogger("fim.worker")

_MINE = (
    "FROM (SELECT id FROM procrastinate_jobs WHERE id = %(job_id)s "
    "AND worker_id = %(worker_id)s FOR UPDATE) AS mine"
)

FINISH = "SELECT procrastinate_finish_job_v1(mine.id, %(status)s, %(delete_job)s) " + _MINE

RETRY = (
    "SELECT procrastinate_retry_job_v2(mine.id, %(retry_at)s, %(new_priority)s, "
    "%(new_queue_name)s, %(new_lock)s) " + _MINE
)


def own_writes(app: procrastinate.App) -> None:
    """Make this app's `finish_job` and `retry_job` write only to a job still held by the
    worker that fetched it (`Job.worker_id`; a job without one is written as before)."""
    manager = app.job_manager
    finish, retry = manager.finish_job, manager.retry_job

    async def finish_job(job: Job, status: Status, delete_job: bool) -> None:
        if job.worker_id is None:
            return await finish(job=job, status=status, delete_job=delete_job)
        rows = await app.connector.execute_query_all_async(
            FINISH,
            job_id=job.id,
            worker_id=job.worker_id,
            status=status.value,
            delete_job=delete_job,
        )
        if not rows:
            _taken(job, "end")
        return None

    async def retry_job(
        job: Job,
        retry_at: datetime.datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
    ) -> None:
        if job.worker_id is None:
            return await retry(job, retry_at=retry_at, priority=priority, queue=queue, lock=lock)
        # deferred: procrastinate loads only with the queue
        from procrastinate.utils import utcnow

        rows = await app.connector.execute_query_all_async(
            RETRY,
            job_id=job.id,
            worker_id=job.worker_id,
            retry_at=retry_at or utcnow(),
            new_priority=priority,
            new_queue_name=queue,
            new_lock=lock,
        )
        if not rows:
            _taken(job, "retry")
        return None

    setattr(manager, "finish_job", finish_job)  # noqa: B010 - an instance's method
    setattr(manager, "retry_job", retry_job)  # noqa: B010 - an instance's method


def _taken(job: Any, what: str) -> None:
    log.warning(
        "job %s is no longer this worker's (another worker took it over): its %s is not written",
        job.id,
        what,
    )
