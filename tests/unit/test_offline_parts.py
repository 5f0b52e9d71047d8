"""The offline GPU recipes' uploads (tools/offline_gpu/split_parts.sh cuts, the host's
join_chunks joins): each upload's run keeps its chunk and says what is still to come, the
run that completes the set gets back the archive byte for byte, and chunks from another
build are refused by the checksum."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "offline_gpu"


def _bash(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], env={**os.environ, **env}, capture_output=True, text=True
    )


def _cut(tmp: Path, name: str, payload: bytes) -> Path:
    work, out, host = tmp / f"w-{name}", tmp / f"out-{name}", tmp / "host"
    work.mkdir()
    host.mkdir(exist_ok=True)
    (host / "setup.sh").write_text("true\n")
    (work / "a.tar").write_bytes(payload)
    cut = _bash(
        f'. {TOOLS}/split_parts.sh && split_parts "$W/a.tar" "$O" up "$H" a.manifest A VER 1.0',
        W=str(work),
        O=str(out),
        H=str(host),
        PART_MAX_MIB="2",
    )
    assert cut.returncode == 0, cut.stderr
    return out


def _join(part: Path, stash: Path, joined: Path) -> subprocess.CompletedProcess[str]:
    return _bash(
        '. "$P/a.manifest" && . "$P/join_chunks.sh" && join_chunks "$P" A "$S" "$J"',
        P=str(part),
        S=str(stash),
        J=str(joined),
    )


def test_two_uploads_join_to_the_archive(tmp_path: Path) -> None:
    payload = os.urandom(3 << 19)  # 1.5 MiB: two chunks of at most 1 MiB
    out = _cut(tmp_path, "one", payload)
    parts = sorted(out.iterdir())
    assert [p.name for p in parts] == ["upa", "upb"]
    assert all((p / "join_chunks.sh").exists() and (p / "setup.sh").exists() for p in parts)
    stash, joined = tmp_path / "stash", tmp_path / "joined.tar"

    first = _join(parts[0], stash, joined)
    assert first.returncode == 1 and "still to upload: a.tar.part-01" in first.stdout
    assert not joined.exists()
    second = _join(parts[1], stash, joined)
    assert second.returncode == 0, second.stdout + second.stderr
    assert joined.read_bytes() == payload
    assert not stash.exists()  # emptied once joined


def test_chunks_of_another_build_are_refused(tmp_path: Path) -> None:
    first_build = _cut(tmp_path, "one", os.urandom(3 << 19))
    other_build = _cut(tmp_path, "two", os.urandom(3 << 19))
    stash, joined = tmp_path / "stash", tmp_path / "joined.tar"
    assert _join(first_build / "upa", stash, joined).returncode == 1
    mixed = _join(other_build / "upb", stash, joined)
    assert mixed.returncode == 3
    assert "bad join" in mixed.stdout and f"rm -rf {stash}" in mixed.stdout


def test_the_last_upload_unpacks_the_archive(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(3 << 19))
    archive = tmp_path / "a.tar.xz"
    subprocess.run(["tar", "-C", str(src), "-cJf", str(archive), "a.bin"], check=True)
    out = _cut(tmp_path, "xz", archive.read_bytes())
    stash, unpacked = tmp_path / "stash", tmp_path / "unpacked"
    for part, rc in (("upa", 1), ("upb", 0)):
        run = _bash(
            '. "$P/a.manifest" && . "$P/join_chunks.sh" && join_and_unpack "$P" A "$S" "$U"',
            P=str(out / part),
            S=str(stash),
            U=str(unpacked),
        )
        assert run.returncode == rc, run.stdout + run.stderr
    assert (unpacked / "a.bin").read_bytes() == (src / "a.bin").read_bytes()
    assert sorted(p.name for p in unpacked.iterdir()) == ["a.bin"]  # the archive is gone
