from memlab.stages.synthesize.base import SynthesizeIn, SynthesizeOut, Synthesizer, merged_unit, union_ids
from memlab.stages.synthesize.prompted import PromptedSynthesizer, greedy_clusters

__all__ = [
    "PromptedSynthesizer",
    "SynthesizeIn",
    "SynthesizeOut",
    "Synthesizer",
    "greedy_clusters",
    "merged_unit",
    "union_ids",
]
