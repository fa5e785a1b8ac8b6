from memlab.stages.synthesize.base import SynthesizeIn, SynthesizeOut, Synthesizer, merged_unit, union_ids
from memlab.stages.synthesize.prompted import PromptedSynthesizer, complete_link_clusters

__all__ = [
    "PromptedSynthesizer",
    "SynthesizeIn",
    "SynthesizeOut",
    "Synthesizer",
    "complete_link_clusters",
    "merged_unit",
    "union_ids",
]
