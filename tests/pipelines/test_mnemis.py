"""Mnemis's control flow with a scripted LM: base-graph ingestion (de-duplication, validity
intervals under contradicting facts), the hierarchy's layer rules, System-2 descent, System-1
budgets, the union's re-ranking, saving and exporting."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import networkx as nx
import pytest

from memlab.config import build_pipeline, load_config
from memlab.embed import SentenceTransformerEmbedder
from memlab.memory.store import MemoryStoreError
from memlab.pipelines.mnemis.hierarchy import build_hierarchy
from memlab.pipelines.mnemis.memory import MnemisMemory
from memlab.pipelines.mnemis.pipeline import Mnemis
from memlab.pipelines.mnemis.search import Candidates, ranked, system1
from memlab.pipelines.mnemis.settings import ConstructionSettings, HierarchySettings, SearchSettings
from memlab.stages.answer import PromptedAnswerer
from memlab.stages.categorize import CategorizeOut, Categorizer, Category, ClusterCategorizer, PromptedCategorizer
from memlab.stages.contradict import PromptedContradictionDetector
from memlab.stages.describe import PromptedEntityDescriber
from memlab.stages.entity import PromptedEntityExtractor
from memlab.stages.fact import PromptedFactExtractor
from memlab.stages.global_select import PromptedGlobalSelector
from memlab.stages.rerank import Reranker, RerankOut
from memlab.stages.temporal import RuleTemporalNormalizer
from memlab.types import History, MemoryUnit, Query, Session, Turn
from tests.fakes import ReplayLM

REPO = Path(__file__).resolve().parents[2]
KINDS = {"Ann": "Person", "Bob": "Person", "Paris": "City", "Berlin": "City", "Rex": "Dog"}
MAY, JUNE = datetime(2023, 5, 8), datetime(2023, 6, 12)


def history() -> History:
    first = (Turn("D1:1", "Ann", "I live in Paris with my dog Rex."),
             Turn("D1:2", "Bob", "Paris is lovely. How is Rex?"))
    second = (Turn("D2:1", "Ann", "I moved to Berlin last week."), Turn("D2:2", "Bob", "Berlin! Is Rex happy there?"))
    return History("c0123", ("Ann", "Bob"), (Session("session_1", MAY, first), Session("session_2", JUNE, second)))


def section(prompt: str, title: str) -> str:
    return prompt.split(f"{title}:\n", 1)[1].split("\n\n", 1)[0]


class Script:
    """Replies by prompt: what each Mnemis stage would be told by a cooperative model."""

    def __init__(self, contradict: bool = True, take_all: bool = False) -> None:
        self.contradict, self.take_all = contradict, take_all
        self.kinds: list[str] = []

    def __call__(self, request) -> str:
        prompt = "\n".join(m["content"] for m in request.messages)
        if "Extract the entities named" in prompt:
            current = section(prompt, "CURRENT MESSAGES")
            return self.reply("entities", {"entities": [n for n in KINDS if n in current]})
        if "Find the entities the list missed" in prompt:
            return self.reply("reflect_entities", {"entities": []})
        if "For each entity below" in prompt:
            names = re.findall(r"^- (\w+)", section(prompt, "ENTITIES"), re.M)
            return self.reply("describe", {"entities": [{"name": n, "summary": f"{n} is talked about.",
                                                         "tags": [KINDS[n]]} for n in names]})
        if "Extract facts from" in prompt:
            if "Berlin" in section(prompt, "CURRENT MESSAGES"):
                facts = [("Ann", "Berlin", "Ann moved to Berlin last week.")]
            else:
                facts = [("Ann", "Paris", "Ann lives in Paris."), ("Ann", "Rex", "Ann has a dog named Rex.")]
            return self.reply("facts", {"facts": [{"source": s, "target": t, "fact": f} for s, t, f in facts]})
        if "Find the facts the list missed" in prompt:
            extra = [] if "Berlin" in section(prompt, "CURRENT MESSAGES") else [
                {"source": "Paris", "target": "Ann", "fact": "Ann lives in Paris"}]  # a near-duplicate
            return self.reply("reflect_facts", {"facts": extra})
        if "no longer true" in prompt:
            existing = section(prompt, "EXISTING FACTS")
            number = re.search(r"^(\d+)\. Ann lives in Paris", existing, re.M)
            berlin = re.search(r"^(\d+)\. Ann moved to Berlin", section(prompt, "NEW FACTS"), re.M)
            closed = [{"existing": int(number.group(1)), "new": int(berlin.group(1)), "quote": "moved to Berlin"}]
            return self.reply("contradict", {"closed": closed if number and berlin and self.contradict else []})
        if "semantic categorization" in prompt:
            return self.reply("categorize", self.categories(prompt))
        if "hierarchical knowledge graph" in prompt:
            nodes = re.findall(r"- uuid: (\w+) \| name: (\w+)", prompt)
            wanted = {"Everything", "Citys", "Paris", "Berlin"}
            return self.reply("select", {"selected": [{"name": n, "uuid": k, "get_all_children": self.take_all}
                                                      for k, n in nodes if n in wanted]})
        return self.reply("answer", "Berlin")

    def categories(self, prompt: str) -> dict:
        listed = prompt.split("<NODE INDEXED NAMES AND DESCRIPTIONS>\n")[1].split("\n</NODE")[0]
        nodes = re.findall(r"^(\d+)\. (\w+): \[([^\]]*)\]", listed, re.M)
        if "Layer 1," not in prompt.split("You are currently at")[1][:20]:  # higher layers: one category
            return {"categories": [{"category": "Everything", "indexes": [int(i) for i, _, _ in nodes]}]}
        groups: dict[str, list[int]] = {}
        for index, _, tags in nodes:
            groups.setdefault(f"{tags.split(',')[0]}s", []).append(int(index))
        return {"categories": [{"category": name, "indexes": members} for name, members in groups.items()]}

    def reply(self, kind: str, value) -> str:
        self.kinds.append(kind)
        return value if isinstance(value, str) else json.dumps(value)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder()
    embedder.warm_up()
    return embedder


def pipeline(script: Script, embedder, **settings) -> Mnemis:
    lm = ReplayLM(script)
    defaults = dict(
        embedder=embedder, entity_extractor=PromptedEntityExtractor(lm=lm), describer=PromptedEntityDescriber(lm=lm),
        fact_extractor=PromptedFactExtractor(lm=lm, normalizer=RuleTemporalNormalizer()),
        contradiction_detector=PromptedContradictionDetector(lm=lm), categorizer=PromptedCategorizer(lm=lm),
        global_selector=PromptedGlobalSelector(lm=lm), answerer=PromptedAnswerer(lm=lm),
        construction=ConstructionSettings(turns_per_episode=2))
    return Mnemis(**{**defaults, **settings})


def fact(memory: MnemisMemory, text: str) -> dict:
    found = [f for f in memory.facts.units.values() if f.text.startswith(text)]
    assert len(found) == 1, [f.text for f in memory.facts.units.values()]
    return memory.fact_edge(found[0].id)


def test_contradicted_fact_is_closed_not_deleted(minilm):
    memory = pipeline(Script(), minilm).build(history())
    paris, berlin = fact(memory, "Ann lives in Paris"), fact(memory, "Ann moved to Berlin")
    assert (paris["valid_at"], paris["invalid_at"]) == (MAY, JUNE)  # closed when Berlin was learnt
    assert paris["contradiction"] == "moved to Berlin"
    assert memory.facts.get(paris["invalidated_by"]).text.startswith("Ann moved to Berlin")
    assert berlin["valid_at"] == datetime(2023, 6, 5) and berlin["invalid_at"] is None  # "last week", resolved in code
    assert fact(memory, "Ann has a dog")["invalid_at"] is None
    assert memory.stats()["invalidated_facts"] == 1 and memory.stats()["facts"] == 3


def test_without_a_contradiction_every_fact_stays_valid(minilm):
    memory = pipeline(Script(contradict=False), minilm).build(history())
    assert all(memory.fact_edge(f)["invalid_at"] is None for f in memory.facts.units)


def test_entities_and_facts_are_deduplicated(minilm):
    memory = pipeline(Script(), minilm).build(history())
    names = sorted(memory.graph.node(e)["name"] for e in memory.entities.units)
    assert names == ["Ann", "Berlin", "Bob", "Paris", "Rex"]  # Ann, Bob, Rex seen again are resolved
    stats = memory.stats()
    assert stats["resolved_mentions"] == 3 and stats["duplicate_facts"] == 1  # "Ann lives in Paris" (reflection)
    ann = next(e for e in memory.entities.units if memory.graph.node(e)["name"] == "Ann")
    assert memory.graph.node(ann)["episodes"] == ["episode:session_1:0", "episode:session_2:0"]
    assert memory.resolve("ann", 0.9) == ann and memory.resolve("Lisbon", 0.9) is None
    assert fact(memory, "Ann lives in Paris")["episodes"] == ["episode:session_1:0"] * 1


class FixedCategorizer(Categorizer):
    """Groups nodes by a fixed name -> categories map, per layer (layer -> {node name: [categories]})."""

    def __init__(self, plan: dict[int, dict[str, list[str]]]) -> None:
        super().__init__()
        self.plan = plan
        self.calls = 0

    def forward(self, batch):
        self.calls += len(batch)
        outs = []
        for item in batch:
            groups: dict[str, list[int]] = {}
            for i, card in enumerate(item.nodes):
                for name in self.plan.get(item.layer, {}).get(card.name, []):
                    groups.setdefault(name, []).append(i)
            outs.append(CategorizeOut(tuple(Category(n, tuple(m)) for n, m in groups.items())))
        return outs


def entity_memory(embedder, names: list[str]) -> MnemisMemory:
    memory = MnemisMemory(embedder)
    ids = memory.add_entities(names)
    memory.describe([(entity_id, "", ()) for entity_id in ids])  # indexed, as after an episode
    return memory


def test_layer_rules_compression_promotion_many_to_many_and_reduction(minilm):
    memory = entity_memory(minilm, ["Rex", "Tom", "Paris", "Berlin", "Ann"])
    plan = {1: {"Rex": ["Pets", "Animals"], "Tom": ["Pets", "Animals"], "Paris": ["Cities"], "Berlin": ["Cities"],
                "Ann": ["People"]},
            2: {"Pets": ["Life", "Home"], "Animals": ["Life", "Nature"], "Cities": ["Places"], "Ann": ["Humans"]}}
    report = build_hierarchy(memory, FixedCategorizer(plan), ratio=2, max_layers=4, batch_size=40)
    layer1 = sorted(memory.graph.node(n)["name"] for n in memory.layers[1])
    assert layer1 == ["Animals", "Ann", "Cities", "Pets"]  # "People" has 1 < n = 2 children: Ann is promoted
    rex = next(e for e in memory.entities.units if memory.graph.node(e)["name"] == "Rex")
    parents = [p for p, _, _ in memory.graph.neighbors(rex, "category_child", direction="in")]
    assert sorted(memory.graph.node(p)["name"] for p in parents) == ["Animals", "Pets"]  # many-to-many
    # Layer 2 would be Life + the promoted Cities and Ann = 3 <= 4: kept; then nothing merges.
    assert sorted(memory.graph.node(n)["name"] for n in memory.layers[2]) == ["Ann", "Cities", "Life"]
    # layer 3 is not tried: 3 nodes cannot hold two categories of n = 2 (the top is layer 2)
    assert report.stopped == "layer 2 has 3 nodes, too few for two categories of 2" and report.dissolved == 1 + 4
    # The reduction rule: a layer 2 with more nodes than layer 1 is discarded.
    memory = entity_memory(minilm, ["Rex", "Tom", "Paris", "Berlin", "tea", "rice", "golf", "judo"])
    wide = {1: {"Rex": ["Pets"], "Tom": ["Pets"], "Paris": ["Cities"], "Berlin": ["Cities"], "tea": ["Food"],
                "rice": ["Food"], "golf": ["Sport"], "judo": ["Sport"]},
            2: {"Pets": ["A", "B", "C"], "Cities": ["A", "B", "C"], "Food": ["D", "E"], "Sport": ["D", "E"]}}
    report = build_hierarchy(memory, FixedCategorizer(wide), ratio=2, max_layers=4, batch_size=40)
    assert report.stopped == "reduction rule (layer 2: 5 > 4 nodes)" and len(memory.layers) == 2
    assert memory.stats()["categories"] == 4


def test_hierarchy_batches_see_earlier_categories_and_rebuilding_replaces_them(minilm):
    memory = entity_memory(minilm, ["Rex", "Tom", "Paris", "Berlin"])
    plan = {1: {"Rex": ["Pets"], "Tom": ["Pets"], "Paris": ["Cities"], "Berlin": ["Cities"]}}
    seen: list[tuple[str, ...]] = []

    class Recording(FixedCategorizer):
        def forward(self, batch):
            seen.extend(tuple(c.name for c in item.existing) for item in batch)
            return super().forward(batch)

    build_hierarchy(memory, Recording(plan), ratio=2, max_layers=1, batch_size=2)
    assert seen == [(), ("Pets",)] and memory.stats()["categories"] == 2  # Rex+Tom, then Paris+Berlin
    build_hierarchy(memory, FixedCategorizer(plan), ratio=2, max_layers=1, batch_size=40)
    assert memory.stats()["categories"] == 2 and len(memory.key_of) == 4 + 2


def test_invalidation_is_shown_only_facts_that_could_conflict(minilm):
    mnemis = pipeline(Script(), minilm)
    memory = entity_memory(minilm, ["Caroline", "Paris", "support group", "counseling", "Berlin"])
    caroline, paris, group, counseling, berlin = memory.entities.units
    for episode in ("episode:1", "episode:2"):
        memory.add_episode(MemoryUnit(episode, "...", (f"D{episode[-1]}:1",), MAY, "episode"))
    old = [memory.add_fact(caroline, paris, "Caroline lives in Paris.", MAY, "episode:1"),
           memory.add_fact(caroline, group, "Caroline went to a LGBTQ support group yesterday.", MAY, "episode:1"),
           memory.add_fact(caroline, berlin, "Caroline visited Berlin once.", MAY, "episode:1")]
    new = [memory.add_fact(caroline, berlin, "Caroline moved to Berlin.", JUNE, "episode:2"),
           memory.add_fact(caroline, counseling, "Caroline is keen on counseling.", JUNE, "episode:2")]
    # a similar predicate on a shared entity ("lives in" / "moved to"), or the same pair of entities
    candidates = mnemis.invalidation_candidates_of(memory, new[:1])
    assert {memory.facts.get(f).text for f in candidates} >= {"Caroline lives in Paris.", "Caroline visited Berlin once."}
    # a topic neighbour with another predicate is not shown (conv-26: "went to a LGBTQ support group"
    # was closed by "is keen on counseling")
    assert mnemis.invalidation_candidates_of(memory, new[1:]) == []
    assert memory.predicate(old[0]) == "lives in ." and set(candidates) <= set(old)


def test_closings_are_listed_for_hand_checking_and_scored(minilm, tmp_path):
    from memlab.eval.hand_check import precision, read_labelled, write_listing
    from memlab.pipelines.mnemis.inspection import closings

    pipeline(Script(), minilm).build(history()).save(tmp_path / "conv")
    rows = closings(MnemisMemory.load(tmp_path / "conv", minilm))  # as saved
    assert [(r["old"], r["new"], r["quote"], r["new_episode"], r["label"]) for r in rows] == [
        ("Ann lives in Paris.", "Ann moved to Berlin last week (the week of 5 June 2023).", "moved to Berlin",
         "episode:session_2:0", None)]
    listing = tmp_path / "closings.jsonl"
    write_listing(listing, rows)
    with pytest.raises(FileExistsError, match="labels are never overwritten"):
        write_listing(listing, rows)
    listing.write_text(json.dumps({**rows[0], "label": "right"}) + "\n" + json.dumps({**rows[0], "label": None}) + "\n")
    scored = precision(read_labelled(listing))
    assert (scored["rows"], scored["checked"], scored["precision"]) == (2, 1, 1.0) and scored["ci"][0] < 1.0
    pooled = precision(read_labelled(listing) + [{**rows[0], "label": "wrong"}])
    assert (pooled["rows"], pooled["checked"], pooled["right"], pooled["precision"]) == (3, 2, 1, 0.5)
    with pytest.raises(ValueError, match="labels must be one of"):
        precision([{**rows[0], "label": "maybe"}])


def test_a_saved_memory_gets_its_hierarchy_made_again_by_another_categorizer(minilm, tmp_path):
    from memlab.config import build_pipeline
    from memlab.pipelines.mnemis.inspection import layers_text, memberships, remake_hierarchy

    pipeline(Script(), minilm).build(history()).save(tmp_path / "conv")
    llm_free = build_pipeline(REPO / "configs/ablations/mnemis_llm_free_hierarchy.yaml", [])[0]
    memory = MnemisMemory.load(tmp_path / "conv", llm_free.embedder)
    structure = remake_hierarchy(memory, llm_free)
    assert structure["entities"] == 5 and structure["rejected_category_replies"] == 0
    assert structure["layer_sizes"][0] == 5 and "layer 1:" in layers_text(memory)
    rows = memberships(memory, 3)
    assert len(rows) == 3 and all(r["layer"] >= 1 and r["category"] and r["child"] and r["label"] is None for r in rows)
    flat = build_pipeline(REPO / "configs/pipelines/mnemis.yaml",
                          ["search.system2=false", "categorizer=null", "global_selector=null"])[0]
    with pytest.raises(ValueError, match="no categorizer"):
        remake_hierarchy(memory, flat)


def test_thresholds_carry_between_embedders_on_a_saved_memory(minilm, tmp_path, monkeypatch):
    from memlab.pipelines.mnemis.thresholds import carried, samples

    memory = pipeline(Script(), minilm).build(history())
    mnemis = pipeline(Script(), minilm)
    found = carried(memory, mnemis, mnemis)  # the same embedder: a threshold carries onto itself
    predicate = found["thresholds"]["predicate_similarity"]
    assert predicate["pairs"] == 3 and found["thresholds"]["entity_threshold"]["pairs"] == 5
    sample = samples(memory, minilm.encode)["predicate_similarity"]
    assert predicate["target"] is None or min(sample) <= predicate["target"] <= max(sample)
    # the memory's facts are de-duplicated: no same-pair fact pair reaches 0.9, nothing to carry
    assert found["thresholds"]["fact_threshold"]["target"] is None
    assert {p["kind"] for p in found["predicate_pairs"]} == {"conflict", "neighbour"}


def test_rejected_replies_and_the_hierarchy_shape_are_in_the_structure(minilm):
    class WholeBatchFirst(Script):
        refused = 0

        def categories(self, prompt):
            listed = re.findall(r"^(\d+)\. ", prompt.split("<NODE INDEXED NAMES AND DESCRIPTIONS>\n")[1], re.M)
            if not self.refused and len(listed) >= 4:
                self.refused += 1
                return {"categories": [{"category": "Everyone", "indexes": [int(i) for i in listed]}]}
            return super().categories(prompt)

    mnemis = pipeline(WholeBatchFirst(), minilm)
    memory = mnemis.build(history())
    structure = mnemis.memory_structure(memory)
    # layer 1: Persons, Citys and the promoted Rex, too few for two categories of 2: the top
    assert structure["rejected_category_replies"] == 1 and structure["layers"] == 1
    assert structure["categories_per_layer"] == [2] and structure["mean_children_per_category"] == [2.0]
    assert structure["largest_category_share"] == 0.4 and not structure["degenerate"]
    assert (structure["facts"], structure["facts_closed"], structure["rejected_invalidation_replies"]) == (3, 1, 0)


def test_the_llm_free_hierarchy_forms_layers_by_the_same_rules(minilm):
    kinds = {"fruit": ["apple", "banana", "pear", "cherry", "mango", "plum", "grape", "peach"],
             "city": ["Paris", "Berlin", "Rome", "Madrid", "Vienna", "Lisbon", "Prague", "Oslo"],
             "pet": ["dog", "cat", "hamster", "parrot", "rabbit", "goldfish", "puppy", "kitten"],
             "sport": ["tennis", "football", "golf", "rugby", "hockey", "cricket", "boxing", "skiing"]}
    memory = MnemisMemory(minilm)
    ids = memory.add_entities([name for names in kinds.values() for name in names])
    kind_of = {name: kind for kind, names in kinds.items() for name in names}
    memory.describe([(e, f"a {kind_of[memory.graph.node(e)['name']]}", (kind_of[memory.graph.node(e)["name"]],))
                     for e in ids])
    stage = ClusterCategorizer(minilm, children_per_category=4)
    report = build_hierarchy(memory, stage, ratio=2, max_layers=4, batch_size=100)
    structure = memory.structure()
    assert structure["layers"] >= 2 and structure["layer_sizes"][:2] == [32, 8], structure
    assert structure["largest_category_share"] <= 0.5 and not structure["degenerate"]
    first = [n for n in memory.layers[1] if memory.node_type(n) == "category"]
    pure = [c for c in first if len({kind_of[memory.graph.node(m)["name"]] for m in memory.children(c)}) == 1]
    assert len(pure) == len(first) >= 4, [(memory.graph.node(c)["name"], [memory.graph.node(m)["name"]
                                                                           for m in memory.children(c)]) for c in first]
    assert report.rejected_replies == 0 and stage.rejected_replies == 0
    # coherence: groups of one kind sit closer than the layer; groups mixing the kinds do not
    coherent = structure["category_coherence_per_layer"][0]
    mixed = [memory.add_category(f"mixed {i}", 9, [ids[i + 8 * k] for k in range(4)]) for i in range(8)]
    assert coherent > 0.1 and memory.coherence(mixed, ids) < coherent / 3, (coherent, memory.coherence(mixed, ids))


def test_one_group_under_several_names_is_counted_and_flagged_when_it_is_half_a_layer(minilm):
    memory = MnemisMemory(minilm)
    ids = memory.add_entities(["dog", "cat", "parrot", "hamster", "Paris", "Rome", "Oslo", "Vienna"])
    memory.describe([(e, "", ()) for e in ids])
    pets, cities = ids[:4], ids[4:]
    memory.layers = [ids, [memory.add_category("Pets", 1, pets),
                           memory.add_category("Animals", 1, pets),             # the same four: repeated
                           memory.add_category("Cities", 1, cities),
                           memory.add_category("Capitals", 1, cities[:3]),      # 3 of the 4: Jaccard 0.75
                           memory.add_category("Places", 1, [*cities, ids[0]])]]  # 4 of 5: Jaccard 0.8
    structure = memory.structure()
    assert structure["repeated_categories_per_layer"] == [2] and structure["repeated_category_share"] == 0.4
    assert not structure["degenerate"]
    memory.layers.append([memory.add_category("Things", 2, memory.layers[1][:2]),
                          memory.add_category("Stuff", 2, memory.layers[1][:2])])
    structure = memory.structure()
    assert structure["repeated_categories_per_layer"] == [2, 1]
    assert structure["degenerate"] == ["layer 2: 1 of its 2 categories repeat another's children"], structure


def test_a_layer_made_mostly_of_uncategorised_promotions_is_flagged(minilm):
    """conv-30's prompted hierarchy: one category at layer 1 and 106 of its 107 nodes promoted as
    themselves; each category under half its layer, which the share rule alone passes."""
    memory = MnemisMemory(minilm)
    ids = memory.add_entities(["dog", "cat", "parrot", "hamster", "Paris", "Rome", "Oslo", "Vienna"])
    memory.describe([(e, "", ()) for e in ids])
    pets = memory.add_category("Pets", 1, ids[:2])
    memory.layers = [ids, [pets, *ids[2:]]]  # 6 of the 7 nodes promoted
    structure = memory.structure()
    assert structure["promoted_per_layer"] == [6] and structure["promoted_share_per_layer"] == [6 / 7]
    assert structure["uncategorised_entities"] == 6 and structure["uncategorised_entity_share"] == 0.75
    assert structure["degenerate"] == ["layer 1: 6 of its 7 nodes are promoted uncategorised"], structure
    cities = memory.add_category("Cities", 1, ids[4:])
    memory.layers = [ids, [pets, cities, ids[2], ids[3]]]  # 2 of 4 promoted: half is not most
    structure = memory.structure()
    assert structure["promoted_per_layer"] == [2] and structure["uncategorised_entities"] == 2
    assert not structure["degenerate"]


def test_the_llm_free_selector_trains_on_the_hierarchy_its_ablation_descends():
    # The replay config (training) and the ablation (running) each spell out the categorizer; a config has one
    # _base_, so nothing else keeps the two from drifting apart.
    trained_on = load_config(REPO / "configs/pipelines/mnemis_llm_free_replay.yaml")
    runs_on = load_config(REPO / "configs/ablations/mnemis_llm_free_trained_selector.yaml")
    shaping = ("embedder", "categorizer", "category_batch", "category_cluster", "compression_ratio", "max_layers",
               "rebuild_every", "selection_batch")
    assert trained_on["categorizer"]["_component_"].endswith("ClusterCategorizer")
    assert {key: trained_on.get(key) for key in shaping} == {key: runs_on.get(key) for key in shaping}


def test_global_selection_descends_layer_by_layer_and_expands_entities(minilm):
    script = Script()
    # n = 1: Rex gets a category of its own, and the three layer-1 categories a root, "Everything"
    mnemis = pipeline(script, minilm, hierarchy=HierarchySettings(compression_ratio=1))
    memory = mnemis.build(history())
    assert [memory.graph.node(n)["name"] for n in memory.layers[-1]] == ["Everything"]
    chosen, ranking, trace = mnemis.search(memory, Query("q1", "Which city does Ann live in now?"))
    step = next(s for s in trace.steps if s["step"] == "retrieve")
    assert step["selection_calls"] == 3 and step["selection_levels"] == 3  # Everything -> Citys -> Paris, Berlin
    names = [memory.graph.node(memory.id_of[k])["name"] for k in step["selected"]]
    assert names[:2] == ["Everything", "Citys"] and sorted(names[2:]) == ["Berlin", "Paris"]
    assert step["system2"] == {"episodes": 2, "entities": 5, "facts": 2}  # Ann is linked through the facts
    take_all = pipeline(Script(take_all=True), minilm, hierarchy=HierarchySettings(compression_ratio=1))
    _, _, trace = take_all.search(memory, Query("q1", "Which city does Ann live in now?"))
    assert next(s for s in trace.steps if s["step"] == "retrieve")["selection_calls"] == 1


def test_answer_shows_each_type_with_validity_and_ranks_episodes_then_facts(minilm):
    mnemis = pipeline(Script(), minilm)
    memory = mnemis.build(history())
    answer = mnemis.answer(memory, Query("q1", "Which city does Ann live in now?"))
    assert answer.text == "Berlin"
    assert "Episodes:\n[8 May 2023] Ann: I live in Paris" in answer.context or "Episodes:\n[12 June" in answer.context
    assert "Ann lives in Paris. (8 May 2023 - 12 June 2023)" in answer.context
    assert "(the week of 5 June 2023). (5 June 2023 - now)" in answer.context
    assert "Entities:\n- " in answer.context and "Berlin [City]: Berlin is talked about." in answer.context
    kinds = [r.unit.kind for r in answer.retrieved]
    assert kinds[:2] == ["episode", "episode"] and set(kinds[2:5]) == {"fact"}
    assert {t for r in answer.retrieved for t in r.unit.source_ids} == {"D1:1", "D1:2", "D2:1", "D2:2"}


def test_system1_budgets_per_type_and_the_union_ordering(minilm):
    mnemis = pipeline(Script(), minilm, search=SearchSettings(system2=False), categorizer=None, global_selector=None)
    memory = mnemis.build(history())
    first = system1(memory, "Where does Ann live?", k=1)
    assert (len(first.episodes), len(first.entities), len(first.facts)) == (1, 2, 2)
    assert memory.stats()["layers"] == 0  # no System-2: no hierarchy built
    second = Candidates(episodes=list(memory.episodes.units), entities=list(memory.entities.units),
                        facts=list(memory.facts.units))
    plain = ranked(memory, "Where does Ann live?", first, second, 1, None, 60, minilm)
    assert plain.episodes == first.episodes and plain.facts == first.facts  # System-1's RRF order first

    class Backwards(Reranker):
        def forward(self, batch):
            return [RerankOut(tuple(float(-i) for i in range(len(item.candidates)))[::-1]) for item in batch]

    reranked = ranked(memory, "Where does Ann live?", first, second, 1, Backwards(), 60, minilm)
    assert reranked.episodes != plain.episodes or len(memory.episodes) == 1
    assert len(reranked.entities) == 2 and len(reranked.facts) == 2


def test_memory_saves_loads_and_exports_graphml_and_pyg(minilm, tmp_path):
    memory = pipeline(Script(), minilm, hierarchy=HierarchySettings(compression_ratio=1)).build(history())
    memory.save(tmp_path / "m")
    loaded = MnemisMemory.load(tmp_path / "m", minilm)
    assert loaded.stats() == memory.stats() and loaded.layers == memory.layers
    assert fact(loaded, "Ann lives in Paris")["invalid_at"] == JUNE
    assert loaded.episodes.search_dense("Berlin", k=1)[0].unit.id == "episode:session_2:0"
    path = loaded.graph.to_graphml(tmp_path / "m.graphml")
    graph = nx.read_graphml(path)
    categories = [d for _, d in graph.nodes(data=True) if d["type"] == "category"]
    assert {d["name"] for d in categories} >= {"Everything", "Citys"} and all("layer" in d for d in categories)
    closed = [d for _, _, d in graph.edges(data=True) if d["type"] == "fact" and "invalid_at" in d]
    assert [d["invalid_at"] for d in closed] == [JUNE.isoformat()]
    data = loaded.graph.to_pyg()
    assert data["category"].num_nodes == memory.stats()["categories"] and data["entity"].num_nodes == 5
    (tmp_path / "m" / "state.json").write_text("{}")
    with pytest.raises(MemoryStoreError, match="m"):
        MnemisMemory.load(tmp_path / "m", minilm)


def test_build_takes_a_history_only(minilm):
    from memlab.types import Conversation

    h = history()
    with pytest.raises(TypeError, match="History"):
        pipeline(Script(), minilm).build(Conversation(h.id, h.speakers, h.sessions))


def test_settings_are_checked():
    with pytest.raises(ValueError, match="search.system2=true needs"):
        Mnemis(None, None, None, None, None)
    with pytest.raises(ValueError, match="context lists"):
        Mnemis(None, None, None, None, None, search=SearchSettings(system2=False, context=("turns",)))


ABLATIONS = sorted((REPO / "configs" / "ablations").glob("mnemis_*.yaml"))


def test_an_episodes_only_configuration_builds_the_episodes_alone(minilm):
    script = Script()
    mnemis = pipeline(script, minilm, search=SearchSettings(system2=False, context=("episodes",)), categorizer=None,
                      global_selector=None)
    memory = mnemis.build(history())
    assert len(memory.episodes) == 2 and not memory.entities.units and not memory.facts.units
    assert script.kinds == []  # Table 4's "System-1 RAG" reads no graph, so none is extracted
    answer = mnemis.answer_many(memory, [Query("q1", "Where does Ann live?")])[0]
    assert answer.retrieved and script.kinds == ["answer"]


def _with_lm(pipeline, lm):
    from memlab.lm.base import LM

    for module in pipeline.modules():
        for key, value in list(vars(module).items()):
            if isinstance(value, LM):
                setattr(module, key, lm)
    return pipeline


@pytest.mark.parametrize("config", [REPO / "configs" / "pipelines" / "mnemis.yaml", *ABLATIONS], ids=lambda p: p.stem)
def test_config_and_each_ablation_run_on_the_sample(config, minilm, monkeypatch):
    from memlab.data import load_sample
    from tests.pipelines.test_no_label_in_prompts import plausible

    assert len(ABLATIONS) == 11
    monkeypatch.chdir(REPO)
    lm = ReplayLM(plausible)
    mnemis = _with_lm(build_pipeline(config)[0], lm)
    mnemis.embedder = minilm
    sample = load_sample()[0]
    memory = mnemis.build(sample.history())
    turn_ids = {t.id for _, t in sample.turns()}
    assert memory.episodes.units and all(set(u.source_ids) <= turn_ids for u in memory.episodes.units.values())
    answers = mnemis.answer_many(memory, [q.as_query() for q in sample.questions[:2]])
    assert all(a.retrieved and isinstance(a.text, str) for a in answers)
    prompts = ["\n".join(m["content"] for m in r.messages) for r in lm.requests]
    selects = any("hierarchical knowledge graph" in p for p in prompts)
    categorizes = any("semantic categorization" in p for p in prompts)
    assert selects == isinstance(mnemis.global_selector, PromptedGlobalSelector)
    assert categorizes == isinstance(mnemis.categorizer, PromptedCategorizer)


@pytest.mark.slow
def test_mnemis_with_a_real_small_model(tmp_path, llama_cpp_works):
    from dataclasses import replace

    from memlab.data import load_sample
    from memlab.types import Conversation

    # Two LM nodes (build and search, YAML anchors): each overridden once for all its stages.
    overrides = [f"{side}.lm.{key}={value}" for side in ("entity_extractor", "global_selector")
                 for key, value in (("model", "smollm2-135m-instruct-q4_1"), ("n_ctx", 2048),
                                    ("cache", tmp_path / "cache.sqlite"))]
    overrides += [f"{stage}.max_tokens={n}" for stage, n in (("entity_extractor", 96), ("describer", 160),
                                                              ("fact_extractor", 160), ("categorizer", 160),
                                                              ("global_selector", 96), ("answerer", 24))]
    mnemis, _, _ = build_pipeline(REPO / "configs" / "pipelines" / "mnemis.yaml", overrides)
    sample = load_sample()[0]
    sessions = tuple(replace(s, turns=s.turns[:4]) for s in sample.sessions[:2])
    small = Conversation(sample.id, sample.speakers, sessions, sample.questions[:1])
    memory = mnemis.build(small.history())
    assert {t for u in memory.episodes.units.values() for t in u.source_ids} == {t.id for _, t in small.turns()}
    answer = mnemis.answer(memory, small.questions[0].as_query())
    assert isinstance(answer.text, str) and answer.retrieved
    assert len(mnemis.lms()) == 2 and all(lm.usage.snapshot()["llm_calls"] > 0 for lm in mnemis.lms())
    assert all(f.stage for f in mnemis.llm_usage().failures)


def test_a_memory_saved_without_its_graph_does_not_serve_a_search_that_reads_it(tmp_path):
    from memlab.config import split_runner_keys
    from memlab.data import load_sample
    from memlab.eval.saved_memories import SavedMemories, SavedMemoryError, build_config

    def config_of_build(overrides):
        pipeline, _, tree = build_pipeline(REPO / "configs/pipelines/mnemis.yaml", overrides)
        return build_config(split_runner_keys(tree)[0], pipeline)

    episodes_only = config_of_build(["search.system2=false", "search.context=[episodes]"])
    graph_without_hierarchy = config_of_build(["search.system2=false", "search.context=[entities, facts]"])
    published = config_of_build([])
    # the search group is a query setting, yet these three builds make different memories
    assert episodes_only["built parts"] == {"graph": False, "hierarchy": False}
    assert graph_without_hierarchy["built parts"] == {"graph": True, "hierarchy": False}
    assert published["built parts"] == {"graph": True, "hierarchy": True}
    conversation = load_sample()[0]
    (tmp_path / "m").mkdir()
    SavedMemories.for_saving(tmp_path / "m", episodes_only).record(conversation, "conv")
    with pytest.raises(SavedMemoryError, match=r"differs in built parts\)"):
        SavedMemories.for_loading(tmp_path / "m", published, [conversation])
    # answering differently from the same parts is allowed: another top_k, another context of the graph
    assert config_of_build(["search.top_k=3"]) == published
    assert config_of_build(["search.system2=false", "search.context=[facts]"]) == graph_without_hierarchy
