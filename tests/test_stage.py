import json
from datetime import datetime

import pytest
import torch
import yaml

from memlab.lm.errors import ParseError
from memlab.prompts import PromptError, load_prompt
from memlab.stage import Stage, StageError, seal_checkpoint
from memlab.stages.answer import AnswerIn, PromptedAnswerer
from memlab.stages.encoder import TextEncoder
from memlab.stages.plan import PlanIn, RoutedPlanner
from memlab.stages.rerank import CrossEncoderReranker, OrderFusionReranker, RerankIn
from memlab.stages.route import RuleRouter
from memlab.stages.segment import SegmentIn, TokenChunkSegmenter, TurnSegmenter
from memlab.types import Session, Turn
from tests.fakes import ReplayLM


def test_prompted_answerer_renders_the_published_prompt_and_parses():
    lm = ReplayLM(["ANSWER: 7 May 2023"])
    answerer = PromptedAnswerer(lm=lm)
    out = answerer([AnswerIn("When did Caroline go?", "[8 May 2023] Caroline: I went yesterday.")])
    assert out[0].text == "7 May 2023" and out[0].error is None
    prompt = lm.requests[0].messages[0]["content"]
    assert "CONTEXT: [8 May 2023] Caroline: I went yesterday." in prompt
    assert prompt.rstrip().endswith("QUESTION: When did Caroline go?\n\nANSWER:")
    assert lm.requests[0].max_tokens == 64 and lm.requests[0].temperature == 0.0


def test_unparseable_output_is_retried_once_then_counted_as_a_failure():
    lm = ReplayLM(["   ", "ok now", "", ""])
    answerer = PromptedAnswerer(lm=lm)
    first, second = answerer([AnswerIn("q1", "c"), AnswerIn("q2", "c")])
    # The batch is answered first (q1 -> "   ", q2 -> "ok now"); then q1 alone is retried
    # (-> "") and, still unusable, becomes a counted failure with the fallback output.
    assert second.text == "ok now"
    assert first.text == "" and first.error == "empty answer"
    assert len(answerer.failures) == 1 and answerer.failures[0].stage == "PromptedAnswerer"
    retry = lm.requests[2]
    assert retry.messages[-1]["role"] == "user" and "could not be parsed" in retry.messages[-1]["content"]
    assert lm.remaining == 1


class _SalvagingAnswerer(PromptedAnswerer):
    """Replies 'partial:X' are unusable but salvage to X."""

    def parse(self, text, item):
        if text.startswith("partial:"):
            raise ParseError("partial reply", salvage=super().parse(text.removeprefix("partial:"), item))
        return super().parse(text, item)


def test_a_salvaged_output_replaces_the_fallback_but_still_counts_as_a_failure():
    answerer = _SalvagingAnswerer(lm=ReplayLM(["partial:first", "partial:only first", "partial:retry", "   "]))
    retried, first_only = answerer([AnswerIn("q1", "c"), AnswerIn("q2", "c")])
    assert retried.text == "retry"  # the retry's salvage is preferred to the first reply's
    assert first_only.text == "only first"  # the retry salvaged nothing: the first reply's salvage
    assert [f.error for f in answerer.failures] == ["partial reply", "empty answer"]


def test_stage_takes_a_batch_not_an_item():
    with pytest.raises(TypeError, match="takes a list"):
        TurnSegmenter()(SegmentIn("c", Session("s", None, ())))


def test_init_kwargs_are_recorded_and_survive_save_load(tmp_path):
    stage = TokenChunkSegmenter(chunk_tokens=64)
    assert stage.init_kwargs == {"chunk_tokens": 64}
    answerer = PromptedAnswerer(lm=ReplayLM([]), max_tokens=12)
    # the LM is a collaborator: not serialised, supplied again at load time
    assert answerer.init_kwargs == {"prompt": "compassmem/answer", "max_tokens": 12, "temperature": 0.0}
    stage.save(tmp_path / "seg")
    assert json.loads((tmp_path / "seg" / "config.json").read_text())["class"] == (
        "memlab.stages.segment.rules.TokenChunkSegmenter")
    manifest = json.loads((tmp_path / "seg" / "manifest.json").read_text())
    assert manifest["format"] == "memlab.Stage" and "torch" in manifest["versions"]
    assert set(manifest["files"]) == {"config.json"}  # no tensors: no weights file
    loaded = Stage.load(tmp_path / "seg")
    assert isinstance(loaded, TokenChunkSegmenter) and loaded.chunk_tokens == 64
    answerer.save(tmp_path / "ans")
    lm = ReplayLM(["x"])
    reloaded = Stage.load(tmp_path / "ans", lm=lm)
    assert reloaded.max_tokens == 12 and reloaded.lm is lm


def test_load_refuses_bad_folders(tmp_path):
    with pytest.raises(StageError, match="no config.json"):
        Stage.load(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(StageError, match="no manifest.json, so its files cannot be checked .*seal_checkpoint"):
        Stage.load(tmp_path)
    seal_checkpoint(tmp_path)  # trust the files as they are: now their contents are checked
    with pytest.raises(StageError, match="malformed stage config"):
        Stage.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"class": "os.path.join", "kwargs": {}}))
    seal_checkpoint(tmp_path)
    with pytest.raises(StageError, match="only memlab"):
        Stage.load(tmp_path)


def test_save_replaces_a_saved_stage_but_never_another_folder(tmp_path):
    TokenChunkSegmenter(chunk_tokens=64).save(tmp_path / "seg")
    TokenChunkSegmenter(chunk_tokens=32).save(tmp_path / "seg")  # a saved stage: replaced
    assert Stage.load(tmp_path / "seg").chunk_tokens == 32
    assert (tmp_path / "seg").stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seg"]  # no temporary or old folder left
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "keep.txt").write_text("not a stage")
    with pytest.raises(StageError, match="not a saved stage; refusing"):
        TokenChunkSegmenter().save(tmp_path / "results")
    assert (tmp_path / "results" / "keep.txt").read_text() == "not a stage"
    (tmp_path / "empty").mkdir()
    TokenChunkSegmenter().save(tmp_path / "empty")  # an empty folder is fine


def test_load_lets_a_keyword_replace_a_saved_argument_and_names_bad_ones(tmp_path):
    TokenChunkSegmenter(chunk_tokens=64).save(tmp_path / "seg")
    assert Stage.load(tmp_path / "seg", chunk_tokens=16).chunk_tokens == 16
    with pytest.raises(StageError, match="cannot rebuild TokenChunkSegmenter .*\\['lm'\\]"):
        Stage.load(tmp_path / "seg", lm=ReplayLM([]))


def test_segmenters_keep_provenance():
    turns = tuple(Turn(f"D1:{i}", "A" if i % 2 else "B", "word " * 40) for i in range(1, 9))
    item = SegmentIn("conv", Session("session_1", None, turns))
    per_turn = TurnSegmenter().run_one(item).units
    assert [u.source_ids for u in per_turn] == [(t.id,) for t in turns]
    assert per_turn[0].text.startswith("[unknown date] A: word")
    chunks = TokenChunkSegmenter(chunk_tokens=100).run_one(item).units
    assert len(chunks) > 1
    assert [sid for u in chunks for sid in u.source_ids] == [t.id for t in turns]


def test_prompt_files_have_sources():
    template = load_prompt("compassmem/answer")
    assert "appendix F.2" in template.source and template.placeholders == {"context", "question"}
    with pytest.raises(PromptError, match="needs values"):
        template.render(context="x")
    with pytest.raises(PromptError, match="no prompt file"):
        load_prompt("compassmem/nope")


class _Scaler(Stage):
    """A stage with two parameters, of which only ``scale`` is checkpointed (like a LoRA adapter)."""

    def __init__(self, factor: float = 1.0) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor([factor]))
        self.base = torch.nn.Parameter(torch.tensor([2.0]), requires_grad=False)

    def checkpoint_state(self):
        return {"scale": self.state_dict()["scale"]}

    def forward(self, batch):
        return [float(x * self.scale * self.base) for x in batch]


@pytest.fixture
def scaler_in_memlab(monkeypatch):
    """Saved stages must be importable from ``memlab``: lend the test class a place there."""
    import memlab.stage

    monkeypatch.setattr(_Scaler, "__module__", "memlab.stage")
    monkeypatch.setattr(memlab.stage, "_Scaler", _Scaler, raising=False)


def test_checkpoint_state_saves_a_subset_and_loading_checks_every_key(tmp_path, scaler_in_memlab):
    from safetensors.torch import load_file, save_file

    stage = _Scaler()
    with torch.no_grad():
        stage.scale.fill_(3.0)
    stage.save(tmp_path / "s")
    assert set(load_file(str(tmp_path / "s" / "model.safetensors"))) == {"scale"}
    assert Stage.load(tmp_path / "s")([1.0]) == [6.0]
    # Weights of another stage, written by hand and sealed, so that the checksums pass:
    save_file({"scale": torch.tensor([1.0]), "stray": torch.tensor([0.0])}, str(tmp_path / "s" / "model.safetensors"))
    with pytest.raises(StageError, match="model.safetensors is corrupted or truncated"):
        Stage.load(tmp_path / "s")
    seal_checkpoint(tmp_path / "s")
    with pytest.raises(StageError, match="unexpected \\['stray'\\]"):
        Stage.load(tmp_path / "s")
    save_file({"base": torch.tensor([1.0])}, str(tmp_path / "s" / "model.safetensors"))
    seal_checkpoint(tmp_path / "s")
    with pytest.raises(StageError, match="missing \\['scale'\\]"):
        Stage.load(tmp_path / "s")
    save_file({"scale": torch.tensor([1.0, 2.0])}, str(tmp_path / "s" / "model.safetensors"))
    seal_checkpoint(tmp_path / "s")
    with pytest.raises(StageError, match=r"do not match _Scaler \(shapes \['scale \(2,\) != \(1,\)'\]\)"):
        Stage.load(tmp_path / "s")


def test_load_stage_puts_a_checkpoint_into_a_config_slot(tmp_path, monkeypatch, scaler_in_memlab):
    from memlab.config import ConfigError, instantiate, validate

    stage = _Scaler(factor=1.5)
    with torch.no_grad():
        stage.scale.fill_(4.0)
    stage.save(tmp_path / "checkpoints" / "scaler")
    monkeypatch.chdir(tmp_path)  # a relative path is taken from the cwd
    node = yaml.safe_load("stage:\n  _component_: memlab.stage.load_stage\n  path: checkpoints/scaler\n")
    validate(node)
    loaded = instantiate(node)["stage"]
    assert isinstance(loaded, _Scaler) and loaded([1.0]) == [8.0]
    answerer = PromptedAnswerer(lm=ReplayLM([]), max_tokens=7)
    answerer.save(tmp_path / "ans")
    lm = ReplayLM([])
    built = instantiate({"_component_": "memlab.stage.load_stage", "path": "ans", "lm": lm})
    assert built.lm is lm and built.max_tokens == 7
    with pytest.raises((StageError, ConfigError), match="nowhere: not a saved stage \\(no config.json\\)"):
        instantiate({"_component_": "memlab.stage.load_stage", "path": "nowhere"})
    # A component the saved class does not take (kept from a swapped-out prompted stage) is dropped.
    dropped = instantiate({"_component_": "memlab.stage.load_stage", "path": "checkpoints/scaler", "lm": lm})
    assert isinstance(dropped, _Scaler) and dropped([1.0]) == [8.0]


def saved_configs(folder):
    return {p.relative_to(folder).as_posix(): json.loads(p.read_text()) for p in folder.rglob("config.json")}


def test_a_composite_saves_its_child_stage_in_a_sub_folder_and_loads_whole(tmp_path):
    torch.manual_seed(0)
    inner = CrossEncoderReranker(TextEncoder(max_length=32, lora_rank=4), batch_size=2)
    inner.warm_up()
    with torch.no_grad():  # stands for training: the head and the LoRA adapter move off their init
        inner.head.bias.add_(0.5)
        next(p for name, p in inner.named_parameters() if "lora_B" in name).add_(0.1)
    fused = OrderFusionReranker(reranker=inner, rrf_k=5, weight=2.0)
    item = RerankIn("Where does Alice live now?", ("Bob plays the guitar.", "Alice lives in Paris now.", "It rained."))
    fused.save(tmp_path / "fused")
    configs = saved_configs(tmp_path / "fused")
    assert set(configs) == {"config.json", "reranker/config.json", "reranker/encoder/config.json"}  # the encoder: a child too
    assert configs["config.json"]["kwargs"] == {"rrf_k": 5, "weight": 2.0}
    assert configs["config.json"]["stages"] == {"reranker": "reranker"}
    assert not any("device" in config["kwargs"] for config in configs.values())  # where it runs is not what it is
    assert not (tmp_path / "fused" / "model.safetensors").exists()  # no tensors of its own, and not the child's again
    torch.manual_seed(123)  # another LoRA init, which the child's checkpoint must overwrite
    loaded = Stage.load(tmp_path / "fused")
    assert isinstance(loaded, OrderFusionReranker) and isinstance(loaded.reranker, CrossEncoderReranker)
    assert loaded.rrf_k == 5 and loaded.weight == 2.0
    assert loaded.reranker([item])[0].scores == inner([item])[0].scores
    assert loaded([item])[0].scores == fused([item])[0].scores
    # A collaborator goes to the nodes that take it (device: the child); one no node takes is named.
    assert Stage.load(tmp_path / "fused", device="cpu").reranker.device == "cpu"
    with pytest.raises(StageError, match="cannot rebuild OrderFusionReranker .*\\['lm'\\]"):
        Stage.load(tmp_path / "fused", lm=ReplayLM([]))
    # A checkpoint written before devices were left out still loads; its device is not used.
    child = tmp_path / "fused" / "reranker" / "config.json"
    child.write_text(json.dumps({**configs["reranker/config.json"],
                                 "kwargs": {**configs["reranker/config.json"]["kwargs"], "device": "cuda:7"}}))
    seal_checkpoint(tmp_path / "fused")
    assert Stage.load(tmp_path / "fused").reranker.device == "cpu"


def test_routed_planner_saves_its_router_and_loads_whole(tmp_path):
    planner = RoutedPlanner(RuleRouter(default_type=None), min_depth=4, default_complexity="LOW")
    planner.save(tmp_path / "planner")
    configs = saved_configs(tmp_path / "planner")
    assert configs["config.json"]["stages"] == {"router": "router"}
    assert configs["router/config.json"]["class"] == "memlab.stages.route.rules.RuleRouter"
    assert not any("device" in config["kwargs"] for config in configs.values())
    loaded = Stage.load(tmp_path / "planner")
    assert isinstance(loaded.router, RuleRouter) and loaded.router.default_type is None
    items = [PlanIn("When did Priya go hiking last week?", datetime(2023, 5, 20)), PlanIn("Why did Bob move?")]
    assert loaded(items) == planner(items)


class _Shifted(Stage):
    """A composite with a tensor of its own: ``inner``'s outputs plus ``shift``."""

    def __init__(self, inner: Stage, shift: float = 0.0) -> None:
        super().__init__()
        self.inner = inner
        self.shift = torch.nn.Parameter(torch.tensor([shift]))

    def forward(self, batch):
        return [y + float(self.shift.detach()) for y in self.inner(batch)]


@pytest.fixture
def shifted_in_memlab(monkeypatch, scaler_in_memlab):
    import memlab.stage

    monkeypatch.setattr(_Shifted, "__module__", "memlab.stage")
    monkeypatch.setattr(memlab.stage, "_Shifted", _Shifted, raising=False)


def test_each_node_of_a_composite_saves_only_its_own_tensors(tmp_path, shifted_in_memlab):
    from safetensors.torch import load_file, save_file

    outer = _Shifted(_Shifted(_Scaler(factor=3.0), shift=1.0), shift=0.5)
    outer.save(tmp_path / "s")
    assert set(load_file(str(tmp_path / "s" / "model.safetensors"))) == {"shift"}
    assert set(load_file(str(tmp_path / "s" / "inner" / "model.safetensors"))) == {"shift"}
    assert set(load_file(str(tmp_path / "s" / "inner" / "inner" / "model.safetensors"))) == {"scale"}
    assert Stage.load(tmp_path / "s")([1.0]) == outer([1.0]) == [7.5]
    assert Stage.load(tmp_path / "s" / "inner")([1.0]) == [7.0]  # a child folder is a saved stage itself
    save_file({"shift": torch.tensor([0.5]), "inner.shift": torch.tensor([1.0])}, str(tmp_path / "s" / "model.safetensors"))
    seal_checkpoint(tmp_path / "s")
    with pytest.raises(StageError, match="unexpected \\['inner.shift'\\]"):
        Stage.load(tmp_path / "s")
