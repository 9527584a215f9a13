"""A copy of the last policy files that loaded, for a worker that starts while the files on disk are broken.

Every gunicorn worker loads the policy directory when it starts. While an invalid edit is being ignored,
the running workers keep their last good set in memory; a worker that starts then (gunicorn replaces one
that crashed, was OOM-killed or hit its timeout) would find nothing it can load, exit with gunicorn's
"worker failed to boot" code, and gunicorn's arbiter then stops the whole server (HaltServer in
gunicorn/arbiter.py). So whenever a worker has a set in force that the files on disk produced, it keeps a
copy of those files here; a worker that cannot load the directory starts from the copy instead.

The directory is the caller's: `gpugate serve` keeps the copy beside the metrics of its run (an emptyDir
outlives a container restart) and removes everything else of a run it starts over (``OWN_PREFIXES``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from ..policy.files import load_policies, policy_files
from ..policy.loader import PolicyError
from ..policy.model import PolicySet

#: The symlink a starting worker reads; it names the newest saved copy.
LINK = "last-good-policies"
#: A saved copy is ``policies-<digest>``; one being written is ``.policies-*``; a link being replaced is
#: ``.last-good-policies.<pid>``.
COPY_PREFIX = "policies-"
STAGING_PREFIX = ".policies-"
TEMPORARY_LINK_PREFIX = f".{LINK}."
#: Every name this module creates in the directory it is given.
OWN_PREFIXES = (COPY_PREFIX, STAGING_PREFIX, TEMPORARY_LINK_PREFIX)


def save(source: str | os.PathLike[str], policies: PolicySet, *, into: Path) -> bool:
    """Copy the policy files of ``source`` if they load to ``policies`` (same digest); True when saved."""
    target = into / f"{COPY_PREFIX}{policies.digest}"
    if not target.is_dir():
        staging = Path(tempfile.mkdtemp(dir=into, prefix=STAGING_PREFIX))
        try:
            for path in policy_files(source):
                shutil.copyfile(path, staging / path.name)
            if load_policies(staging).digest != policies.digest:
                return False  # the files changed since they were loaded: next time
            with contextlib.suppress(OSError):  # another worker saved the same files first: as good
                staging.rename(target)
        except (OSError, PolicyError):
            return False
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    link = into / LINK
    temporary = into / f"{TEMPORARY_LINK_PREFIX}{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    temporary.symlink_to(target.name)
    os.replace(temporary, link)  # atomic: a starting worker sees the old copy or the new one
    return True


def load(*, from_: Path) -> PolicySet:
    """The saved copy; PolicyError or OSError when there is none that loads."""
    return load_policies(from_ / LINK)
