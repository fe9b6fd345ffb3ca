"""The vLLM inside container images, as data: NVIDIA's NGC tags and the community images a DGX Spark runs.

`NGC_TAGS` is tests/fixtures/ngc-vllm-tags.yaml's `tags` (tests/test_vllm_versions.py requires them equal): each
nvcr.io/nvidia/vllm tag, the vLLM it ships, the build string its start-up log prints, the confidence and the
source. Confidence: `stated` = NVIDIA's release notes or a direct quote of them; `inferred-from-log` = printed
by the running image (its banner, `vLLM API server version …`, pip freeze) or reported by users; `unknown` = no
evidence. Where the two disagree the version follows the image and `release_notes_vllm` keeps NVIDIA's figure.

`REPOS` is the file's `community_spark_images`: repositories whose tag states the vLLM (scitrera/dgx-spark-vllm:
0.16.0-t4, vllm/vllm-openai:v0.17.0-aarch64-cu130), a few known tags whose name does not (avarok's v22), and
repositories whose tags never do (nightly, latest, date tags, forks). Any other image is unknown: no guess.
"""

from __future__ import annotations

import re

from launcher.common.records import dataclass

NGC_REPO = "nvidia/vllm"


@dataclass(frozen=True)
class NgcTag:
    """One nvcr.io/nvidia/vllm tag and the vLLM it ships."""

    tag: str  # 25.11-py3, 25.12.post1-py3 (one tag for amd64 and arm64: a multi-arch manifest)
    vllm: str | None  # None: unknown
    build: str | None  # the version its log prints (0.11.0+582e4e37.nv25.11), where one was seen
    confidence: str  # stated, inferred-from-log, unknown
    source: str
    release_notes_vllm: str | None = None  # NVIDIA's figure where the image reports another


_NOT_RECORDED = "a GitHub file whose repository is not recorded"
_NOTES = "https://docs.nvidia.com/deeplearning/frameworks/vllm-release-notes/"

NGC_TAGS: dict[str, NgcTag] = {t.tag: t for t in (
    NgcTag("25.09-py3", "0.10.1.1", "0.10.1.1+381074ae.nv25.09", "inferred-from-log",
           "https://github.com/Stravica/nvidia-spark/blob/c64c72108b84dae57c09494217e10ac134bd04a6/docs/vllm/"
           "qwen3-30b-a3b-fp8.md"),
    NgcTag("25.10-py3", "0.10.2", "0.10.2+9dd9ca32.nv25.10", "stated", f"{_NOTES}rel-25-10.html"),
    NgcTag("25.11-py3", "0.11.0", "0.11.0+582e4e37.nv25.11", "inferred-from-log",
           "https://github.com/ArmDeveloperEcosystem/arm-learning-paths/blob/3f6fafdcca574f5a00e6b4545f2820c3becfb344/"
           "content/learning-paths/laptops-and-desktops/dgx_spark_voicechatbot/4_vllm.md"),
    NgcTag("25.12-py3", "0.11.1", "0.11.1+9114fd76", "inferred-from-log",
           "https://github.com/vllm-project/vllm/issues/31424"),
    NgcTag("25.12.post1-py3", "0.12.0", "0.12.0+35a9f223.nv25.12.post1", "inferred-from-log",
           "https://github.com/NVIDIA-AI-Blueprints/nemotron-voice-agent/blob/28ccf6a47e5adee038c910904a8fcf881d971f13/"
           "skills/configure-pipeline/SKILL.md"),
    NgcTag("26.01-py3", "0.13.0", "0.13.0+faa43dbf.nv26.01", "inferred-from-log", f"{_NOTES}rel-26-01.html",
           release_notes_vllm="0.11.1"),
    NgcTag("26.02-py3", "0.15.1", "0.15.1+befbc472", "inferred-from-log", _NOT_RECORDED),
    NgcTag("26.03-py3", "0.17.1", "0.17.1+a03ca76a.nv26.03.46967107", "stated", f"{_NOTES}rel-26-03.html"),
    NgcTag("26.03.post1-py3", "0.17.1", None, "inferred-from-log", _NOT_RECORDED),
    NgcTag("26.04-py3", "0.19.0", "0.19.0+nv26.04", "inferred-from-log", _NOT_RECORDED),
    NgcTag("26.05-py3", "0.20.1", None, "stated", f"{_NOTES}rel-26-05.html"),
    NgcTag("26.05.post1-py3", "0.21.0", "0.21.0+2325b6f0.nvinternal.26.5.post1", "inferred-from-log", _NOT_RECORDED),
    NgcTag("26.06-py3", "0.22.1", None, "stated", "https://github.com/timothystewart6/vllm-gb10/pull/35"),
    NgcTag("26.07-py3", "0.24.0", "0.24.0+092c4842", "inferred-from-log", _NOT_RECORDED),
    NgcTag("26.08-py3", "0.27.1", "0.27.1+93523f72.dev", "inferred-from-log",
           "https://github.com/gyliu513/langX101/pull/409"),
    NgcTag("26.09-py3", "0.29.0", None, "inferred-from-log", _NOT_RECORDED),
    NgcTag("26.10-py3", "0.31.0", None, "stated", f"{_NOTES}rel-26-10.html"),
)}  # fmt: skip


@dataclass(frozen=True)
class Repo:
    """A community image repository and what its tags say about the vLLM inside."""

    names: tuple[str, ...]  # repository paths without the registry host
    vllm_version: str  # the table's words for it ("the tag prefix (…)", "not stated (…)")
    source: str
    states_version: bool  # a tag led by a version (v0.24.0-gb10.0, 0.16.0-t4) names the vLLM inside
    tags: tuple[tuple[str, str], ...] = ()  # tags whose name states no version -> the vLLM a user reported


REPOS: tuple[Repo, ...] = (
    Repo(("spark-arena/dgx-vllm-eugr-nightly", "spark-arena/dgx-vllm-eugr-nightly-tf5"),
         "not stated (nightly build of vLLM main; -tf5 = transformers 5)",
         "https://github.com/spark-arena/sparkrun/blob/0041b8f8fc1320ffa2e85d2d0ac760ee6be19de7/src/sparkrun/builders/"
         "eugr.py", states_version=False),
    Repo(("scitrera/dgx-spark-vllm",), "the tag prefix (0.13.0, 0.14.0, 0.14.1, 0.15.0, 0.15.1, 0.16.0)",
         "https://github.com/scitrera/cuda-containers/blob/1528d11dc7ac536be1f0f2574b42e6b18a940907/README.md",
         states_version=True),
    Repo(("scitrera/dgx-spark-vllm-jasl-ds4",), "not stated (jasl DeepSeek-V4/sm12x fork)",
         "https://github.com/spark-arena/recipe-registry/blob/307578001460733fcb9335d0e84f8d3e38e40552/"
         "experimental-recipes/deepseek4/deepseek4-flash-fp8-vllm.yaml", states_version=False),
    Repo(("sparkarena/spark-vllm-docker",),
         "not stated (christopherowen/vllm fork @045293d82; adds --mxfp4-backend/--mxfp4-layers)",
         "https://github.com/spark-arena/recipe-registry/blob/307578001460733fcb9335d0e84f8d3e38e40552/"
         "experimental-recipes/eugr-vllm/openai-gpt-oss-120b-vllm.yaml", states_version=False),
    Repo(("timothystewart6/vllm-gb10",), "0.24.0",
         "https://github.com/timothystewart6/vllm-gb10/blob/07c640b6728ffb3243f035c6dc82ba163324ff1f/README.md",
         states_version=True),
    Repo(("avarok/dgx-vllm-nvfp4-kernel",), "v0.16.0rc2 (pinned commit, per a user)",
         "https://github.com/Avarok-Cybersecurity/dgx-vllm/issues/13", states_version=False,
         tags=(("v22", "0.16.0rc2"),)),
    Repo(("th0rgal/vllm-gb10-dgx-spark",),
         "not stated (vLLM built from source on nvcr.io/nvidia/vllm:25.12.post1-py3)",
         "https://github.com/Th0rgal/vllm-gb10-dgx-spark", states_version=False),
    Repo(("vllm/vllm-openai",), "named by the tag where it is a version",
         "https://github.com/NVIDIA/dgx-spark-playbooks/blob/0db7c141da60870ca6ed5c99436320f4e35cd531/nvidia/vllm/"
         "README.md", states_version=True),
    Repo(("vllm-node", "vllm-node-tf5"),
         "not stated (whatever vLLM ref was built; one recipe mentions vllm-node at vLLM 0.18.1)",
         "https://github.com/eugr/spark-vllm-docker/blob/eb390157cdaa312894b8c7706780629c466a6da2/recipes/"
         "4x-spark-cluster/nemotron-3-ultra-nvfp4.yaml", states_version=False),
)  # fmt: skip


@dataclass(frozen=True)
class ImageVersion:
    """The vLLM an image runs, as vlaunch's tables know it."""

    version: str | None  # as the table or the tag writes it; None: unknown
    detail: str  # one line: the image, its vLLM and who says so, or why it is unknown
    cite: str = ""  # who says so and how sure: "stated in NVIDIA's release notes 26.03"


def source_label(source: str) -> str:
    """A short name for a source: "NVIDIA's release notes 26.03", "vllm-project/vllm#31424", "owner/repo"."""
    if m := re.search(r"vllm-release-notes/rel-(\d\d)-(\d\d)\.html$", source):
        return f"NVIDIA's release notes {m[1]}.{m[2]}"
    if m := re.match(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", source):
        return f"{m[1]}#{m[2]}"
    if m := re.match(r"https://github\.com/([^/]+/[^/]+)", source):
        return m[1]
    return source


def cite(t: NgcTag) -> str:
    """Where an NGC tag's vLLM comes from and how sure that is, in words."""
    where = source_label(t.source)
    if t.confidence == "stated":
        notes = where.startswith("NVIDIA's release notes")
        return f"stated in {where}" if notes else f"stated in NVIDIA's release notes, as quoted in {where}"
    if t.confidence == "inferred-from-log" and t.release_notes_vllm:
        return f"inferred from the running image's log; {where} say {t.release_notes_vllm}"
    if t.confidence == "inferred-from-log":
        return f"inferred from the running image's log or users' reports: {where}"
    return f"confidence {t.confidence}: {where}"


def split_image(image: str) -> tuple[str, str | None, bool]:
    """(repository without the registry host, tag or None, pinned by a digest) of an image reference."""
    ref, at, _ = image.strip().partition("@")
    name, colon, tag = ref.rpartition(":")
    if not colon or "/" in tag:
        name, tag = ref, ""
    parts = name.lower().split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    if len(parts) > 1 and parts[0] == "library":
        parts = parts[1:]
    return "/".join(parts), tag or None, bool(at)


def _named(repo: str, name: str) -> bool:
    """`repo` is `name`, or a mirror's path ending in it (registry.example/mirror/vllm/vllm-openai)."""
    return repo == name or repo.endswith(f"/{name}")


_LEADING_VERSION = re.compile(r"^[vV]?\d+\.\d+(?:\.\d+)*(?:(?:a|b|rc|\.?post|\.?dev)\d+)*(?=$|-)")


def lookup(image: str) -> ImageVersion:
    """The vLLM `image` runs, from the NGC table or a community repository's tag; unknown otherwise."""
    repo, tag, digest = split_image(image)
    if tag is None and digest:
        return ImageVersion(None, f"the vLLM in {image} is unknown (named by its digest alone)")
    tag = tag or "latest"
    if _named(repo, NGC_REPO):
        known = NGC_TAGS.get(tag)
        if known and known.vllm:
            return ImageVersion(known.vllm, f"{image} ships vLLM {known.vllm} ({cite(known)})", cite(known))
        if known:
            return ImageVersion(None, f"the vLLM in {image} is unknown ({cite(known)})")
        return ImageVersion(None, f"the vLLM in {image} is unknown (NVIDIA's tag {tag} is in none of vlaunch's tables)")
    community = next((r for r in REPOS if any(_named(repo, name) for name in r.names)), None)
    if community is None:
        return ImageVersion(None, f"the vLLM in {image} is unknown (the image is in none of vlaunch's tables)")
    where = source_label(community.source)
    if fixed := dict(community.tags).get(tag):
        said = f"{community.vllm_version}: {where}"
        return ImageVersion(fixed, f"{image} runs vLLM {fixed} ({said})", said)
    if community.states_version and (m := _LEADING_VERSION.match(tag)):
        version = m[0].lstrip("vV")
        said = f"its tag states it: {where}"
        return ImageVersion(version, f"the tag of {image} states vLLM {version} ({where})", said)
    text = community.vllm_version
    about = f"; {text[len('not stated (') : -1]}" if text.startswith("not stated (") else ""
    return ImageVersion(None, f"the vLLM in {image} is unknown (its tag states no version{about})")
