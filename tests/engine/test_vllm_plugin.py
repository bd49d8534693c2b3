"""xcforge's vLLM general plugin: registered where vLLM looks, and the AMX request it makes is real."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from xcforge_engine import vllm_plugin
from xcforge_engine.cpuinfo import read_cpuinfo
from xcforge_engine.host import Host


def _host_has_amx() -> bool:
    cpu = read_cpuinfo(Host.real())
    return cpu.arch == "x86_64" and cpu.has("amx_tile")


def test_the_entry_point_is_where_vllm_loads_general_plugins():
    # vllm.plugins.load_general_plugins() reads exactly this group and calls the loaded object.
    entries = {ep.name: ep for ep in metadata.entry_points(group="vllm.general_plugins")}
    assert "xcforge" in entries, sorted(entries)
    assert entries["xcforge"].load() is vllm_plugin.register


PROBE = """
import ctypes, json, platform, sys
from xcforge_engine import vllm_plugin as p
libc = ctypes.CDLL(None)
before = p._xcomp_perm(libc) if sys.platform == "linux" and platform.machine() == "x86_64" else None
outcome, detail = p.request_amx()
after = p._xcomp_perm(libc) if before is not None else None
print(json.dumps({"outcome": outcome, "detail": detail, "before": before, "after": after}))
"""


def test_a_fresh_process_gets_amx_tile_data_from_the_kernel():
    """In a new process (as a vLLM worker is) the grant is absent until the plugin asks for it."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60)
    result = json.loads(out.stdout)
    if not _host_has_amx():
        assert result["outcome"] == "not-needed", result
        pytest.skip(f"this host has no AMX ({result['detail']}); the request ran and was not needed")
    tiledata = 1 << vllm_plugin.XFEATURE_XTILEDATA
    assert result["outcome"] == "granted", result
    assert not result["before"] & tiledata, result  # exec cleared it: every vLLM process must ask
    assert result["after"] & tiledata, result


def test_no_amx_flag_means_no_request(tmp_path: Path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
    outcome, detail = vllm_plugin.request_amx(Host(tmp_path, strict_devices=False))
    assert outcome == "not-needed"
    if sys.platform == "linux":
        assert "amx_tile" in detail


def test_register_is_quiet_when_granted_or_not_needed(capsys):
    vllm_plugin.register()
    assert capsys.readouterr().err == ""
