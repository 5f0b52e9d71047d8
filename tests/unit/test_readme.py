"""The README's first screen and its links: the one-flag GPU command validates through
vLLM on the real shapes, and every link into BENCHMARKS.md or the README itself lands on
a heading that exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.unit.test_configs import _engine_config_from_argv, hub  # noqa: F401 - fixture

README = REPO / "README.md"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("doc", ["README.md", "docs/serving.md", "docs/tuning.md"], ids=lambda d: d)
def test_links_to_anchors_resolve(doc: str) -> None:
    path = REPO / doc
    text = path.read_text()
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([a-z0-9_-]+)\)", text):
        linked = (path.parent / target).resolve() if target else path
        assert anchor in _anchors(linked), f"{doc}: {target}#{anchor} has no heading"


def test_first_screen_has_the_two_commands_and_the_one_flag_gpu_line(
    hub: dict[str, str],  # noqa: F811 - the shape directories
) -> None:
    first = "\n".join(README.read_text().splitlines()[:40])
    assert "make demo" in first and "make test" in first
    block = re.search(r"```bash\n(pip install[^\n]*\nvllm serve .*?)```", first, flags=re.S)
    assert block, "the first screen lost its GPU command"
    serve = re.sub(r"\\\n\s*", " ", block.group(1)).splitlines()[1]
    argv = shlex.split(serve)[2:]
    cfg = _engine_config_from_argv(["--model", argv[0], *argv[1:]], hub)
    options = cfg.additional_config["frozen_kv_mtp"]
    assert cfg.speculative_config.use_gemma4_mtp()
    assert options["k_policy"] == "auto" and cfg.speculative_config.num_speculative_tokens == 7
