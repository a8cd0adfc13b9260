"""A rank's job id completed with the token its job agreed, where it never heard it.

A capture's job id is the rendezvous address every rank was given plus a token agreed with
rank 0 (``host:port@token``, tracemerge.capture.identity): two runs on one address get
different ids. A rank that could not ask rank 0 (rank 0 held up when it asked, the rank
hung and ended by SIGTERM before RPC answered) has the address only. Such an id is of the
job whose id has that address and a token, when exactly one of the other files has one:
it is given that id, so the checks and the joins take it as of its job. Where two runs'
ids share the address, which run it was is unknown, and its id is kept as it is.
"""

from typing import Any, List, Optional, Sequence


def agreed_job_ids(infos: Sequence[Any]) -> List[Optional[str]]:
    """The job id of each of ``infos`` (RankInfo-like: ``job_id``), an address-only one
    completed with the one token the others give that address (see the module's doc)."""
    tokens: dict = {}
    for info in infos:
        where, at, token = info.job_id.rpartition("@") if isinstance(info.job_id, str) else ("", "", "")
        if at and token:
            tokens.setdefault(where, set()).add(info.job_id)
    out: List[Optional[str]] = []
    for info in infos:
        job_id = info.job_id
        found = tokens.get(job_id, ()) if isinstance(job_id, str) and job_id and "@" not in job_id else ()
        out.append(next(iter(found)) if len(found) == 1 else job_id)
    return out
