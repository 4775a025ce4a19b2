"""THE guard and writer for every file onnxq writes.

A run (one command, or one quantize() call) declares what it reads and what it will write before any work. Each
output is refused when it is an input of the run (the model, its external data, calibration or verification data,
the config, a cache being read), another output of the same run, inside a data folder the run reads, or — when it
exists — not a regular file: `-o /dev/null` as root must not replace /dev/null with a file. Outputs are staged in a
private temporary folder beside their target and renamed into place together at the end, after checking that no
input changed meanwhile; a run that fails leaves none of them, and an output it had already replaced is restored.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from onnxq.errors import InputChangedError, OnnxqError, OutputPathError, one_line
from onnxq.io.reads import Snapshot, file_kind, regular_file

__all__ = ["RunFiles", "run_files", "active_run", "write_output", "staging_folders"]

_ACTIVE: contextvars.ContextVar[RunFiles | None] = contextvars.ContextVar("onnxq_run_files", default=None)
_STAGING = ".onnxq-"
# Every staging folder that exists now, for a fatal-signal handler to remove (it cannot see the context variable).
_LIVE: set[Path] = set()


def staging_folders() -> set[Path]:
    return set(_LIVE)


@contextlib.contextmanager
def run_files() -> Iterator[RunFiles]:
    """The files of this run: the enclosing run's when there is one (it commits), else a new run's, committed when
    the block ends normally and discarded when it raises."""
    outer = _ACTIVE.get()
    if outer is not None:
        yield outer
        return
    files = RunFiles()
    token = _ACTIVE.set(files)
    try:
        yield files
        files.commit()
    except BaseException:
        files.discard()
        raise
    finally:
        _ACTIVE.reset(token)


def active_run() -> RunFiles:
    """The files of the run in progress (inside run_files())."""
    files = _ACTIVE.get()
    if files is None:
        raise RuntimeError("no run in progress: use onnxq.io.run_files()")
    return files


def write_output(path: str | os.PathLike, write: Callable[[Path], None], what: str = "output",
                 also: Iterable[str | os.PathLike] = ()) -> Path:
    """Stage one output in the current run, claiming it unless the run already has (in a run of its own, committed
    at once, outside one)."""
    with run_files() as files:
        if not files.claimed(path):
            files.claim(path, what, also)
        files.stage(path, write)
    return Path(path)


@dataclasses.dataclass
class _Staged:
    folder: Path
    files: list[tuple[Path, Path]]  # (staged file, target)


class RunFiles:
    """What one run reads (with a snapshot of each file) and what it writes (checked, then staged)."""

    def __init__(self) -> None:
        self._inputs: dict[Path, tuple[str, Snapshot | None]] = {}
        self._data_folders: dict[Path, str] = {}
        self._outputs: dict[Path, str] = {}
        self._staged: list[_Staged] = []

    # -- inputs ------------------------------------------------------------------------------------------------
    def read(self, path: str | os.PathLike, what: str, error: type[OnnxqError] = OnnxqError) -> Path:
        """Check that the path is a regular file and record it as an input; returns it."""
        regular_file(path, what, error)
        self.add_input(path, what)
        return Path(path)

    def add_input(self, path: str | os.PathLike, what: str) -> None:
        target = _resolved(path)
        if target in self._outputs:
            raise OutputPathError(f"{self._outputs[target]} {one_line(path)} would overwrite {what} — choose "
                                  "another path; onnxq never writes over what it reads")
        self._inputs.setdefault(target, (what, Snapshot.of(target)))

    def add_data_folder(self, folder: str | os.PathLike, what: str) -> None:
        """A folder read as data: every file in it with a data suffix is a shard, so no output may land there."""
        target = _resolved(folder)
        for output, label in self._outputs.items():
            if _is_data_file(output) and output.parent == target:
                raise OutputPathError(f"{label} {output} is inside {what} folder {one_line(folder)}, where it would "
                                      "be read as data — choose another folder")
        self._data_folders[target] = what

    # -- outputs -----------------------------------------------------------------------------------------------
    def claim(self, path: str | os.PathLike, what: str, also: Iterable[str | os.PathLike] = ()) -> Path:
        """Check, before any work, that the run may write this output (and its companions `also`, such as the
        external data file of a large model); returns the absolute path."""
        path = Path(path).absolute()
        _check_folder(_resolved(path) if _is_symlink(path) else path, what)  # where it will be written
        for each in (path, *map(Path, also)):
            target = _resolved(each)
            if self._outputs.get(target, what) != what:
                raise OutputPathError(f"{what} {one_line(each)} is also the run's {self._outputs[target]} — give "
                                      "each output its own path")
            self._check_not_read(each, target, what)
            _check_replaceable(each, what)
            self._outputs[target] = what
        return path

    def claimed(self, path: str | os.PathLike) -> bool:
        return _resolved(path) in self._outputs

    def _check_not_read(self, path: Path, target: Path, what: str) -> None:
        if target in self._inputs:
            raise OutputPathError(f"{what} {one_line(path)} would overwrite {self._inputs[target][0]} — choose "
                                  "another path; onnxq never writes over what it reads")
        if _is_data_file(target) and target.parent in self._data_folders:
            raise OutputPathError(f"{what} {one_line(path)} is inside {self._data_folders[target.parent]} folder, "
                                  "where it would be read as data — choose another folder")

    def stage(self, path: str | os.PathLike, write: Callable[[Path], None]) -> int:
        """Write an output into a staging folder beside its target: write(p) makes the file p (whose name is the
        target's) and may make claimed companions beside it. Returns the bytes staged."""
        target = _resolved(path)
        if target not in self._outputs:
            raise OutputPathError(f"internal: output {path} was not claimed before it was written")
        what = self._outputs[target]
        folder = _staging_folder(target, what)
        try:
            write(folder / target.name)
            made = sorted(folder.iterdir())
            mask = _umask()
            for file in made:
                os.chmod(file, 0o666 & ~mask)  # the usual permissions (mkdtemp's folder is private, not its files)
        except OSError as e:
            _remove(folder)
            raise OutputPathError(f"could not write {what} {one_line(path)}: {e.strerror or e} — free some space or "
                                  "choose another path; nothing was written") from None
        except BaseException:
            _remove(folder)
            raise
        files = [(file, target.parent / file.name) for file in made]
        unclaimed = [t for _, t in files if t not in self._outputs]
        if unclaimed:
            _remove(folder)
            raise OutputPathError(f"internal: {unclaimed[0]} was written without being claimed")
        self._staged.append(_Staged(folder, files))
        return sum(f.stat().st_size for f, _ in files)

    def staged_bytes(self, paths: Iterable[str | os.PathLike]) -> int:
        """The size of outputs as staged (before commit) or as written (after)."""
        sizes = {target: staged.stat().st_size for s in self._staged for staged, target in s.files}
        return sum(sizes[t] if t in sizes else t.stat().st_size for t in map(_resolved, paths))

    # -- the end of the run ------------------------------------------------------------------------------------
    def commit(self) -> None:
        """Every input as it was at the start, then every staged output renamed into place — or none."""
        try:
            self._check_inputs_unchanged()
            replaced: list[tuple[Path, Path | None, bool]] = []  # (target, backup, existed)
            try:
                for staged in self._staged:
                    for file, target in staged.files:
                        existed = target.exists()
                        backup = _backup(target, staged.folder) if existed else None
                        replaced.append((target, backup, existed))
                        os.replace(file, target)
            except BaseException:
                for target, backup, existed in reversed(replaced):
                    _restore(target, backup, existed)
                raise
        except OSError as e:
            raise OutputPathError(f"could not move the outputs into place: {e.strerror or e} — nothing was "
                                  "written") from None
        finally:
            self.discard()

    def discard(self) -> None:
        for staged in self._staged:
            _remove(staged.folder)
        self._staged.clear()

    def check_inputs_unchanged(self, when: str = "") -> None:
        """Every input as it was when declared; a run calls it right after loading and between its steps, so that a
        change stops it then, not at its end. when: where the run is, in words ("after calibrate")."""
        for path, (what, before) in self._inputs.items():
            if before is not None and Snapshot.of(path) != before:
                seen = f", seen {when}" if when else ""
                raise InputChangedError(f"{what} {one_line(path)} changed while onnxq ran (another program wrote, "
                                        f"truncated or replaced it{seen}) — nothing was written; rerun when it is "
                                        "stable")

    def _check_inputs_unchanged(self) -> None:
        self.check_inputs_unchanged()


def _resolved(path: str | os.PathLike) -> Path:
    return Path(path).absolute().resolve()


def _is_symlink(path: Path) -> bool:
    try:
        return path.is_symlink()
    except OSError:  # a name too long for the file system: _check_folder says so
        return False


def _is_data_file(path: Path) -> bool:
    return path.suffix.lower() in (".npz", ".npy")


def _check_folder(path: Path, what: str) -> None:
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise OutputPathError(f"{what}: {one_line(parent)} is a file, not a folder — choose another path")
    if not parent.is_dir():
        raise OutputPathError(f"the folder of {what} {one_line(path)} does not exist — create it or choose another "
                              "path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"the folder of {what} {one_line(path)} is not writable — choose another path")
    try:
        longest = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # not POSIX, or the file system does not say
        longest = 255
    if len(os.fsencode(path.name)) > longest:
        raise OutputPathError(f"{what} {one_line(path)}: its name is {len(os.fsencode(path.name))} bytes, longer than "
                              f"this file system allows ({longest}) — choose a shorter name")
    _remove(_staging_folder(path, what))  # a probe: can a file be made there at all (/proc, read-only mounts)?


def _check_replaceable(path: Path, what: str) -> None:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputPathError(f"{what} {one_line(path)} cannot be checked ({e.strerror or e}) — choose another "
                              "path") from None
    if stat.S_ISDIR(mode):
        raise OutputPathError(f"{what} {one_line(path)} is a folder — give a file name, e.g. "
                              f"{one_line(path / 'model.int8.onnx')}")
    if not stat.S_ISREG(mode):
        raise OutputPathError(f"{what} {one_line(path)} exists and is {file_kind(mode)}; onnxq replaces only regular "
                              "files — choose another path")


def _staging_folder(target: Path, what: str) -> Path:
    try:
        folder = Path(tempfile.mkdtemp(prefix=_STAGING, dir=target.parent))
    except OSError as e:
        raise OutputPathError(f"cannot write {what} {one_line(target)} in {one_line(target.parent)} "
                              f"({e.strerror or e}) — choose another folder") from None
    _LIVE.add(folder)
    return folder


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    _LIVE.discard(folder)


def _backup(target: Path, folder: Path) -> Path | None:
    """A hard link to the file about to be replaced (so that a failed commit can put it back), or None when the
    file system has no hard links."""
    backup = folder / f".previous-{target.name}"
    try:
        os.link(target, backup)
    except OSError:
        return None
    return backup


def _restore(target: Path, backup: Path | None, existed: bool) -> None:
    with contextlib.suppress(OSError):
        if backup is not None:
            os.replace(backup, target)
        elif not existed:
            target.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
