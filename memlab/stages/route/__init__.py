from memlab.stages.route.base import INTENTS, QUESTION_TYPES, IntentRouter, RouteIn, RouteOut, query_signals
from memlab.stages.route.linear import TfidfRouter
from memlab.stages.route.neural import QueryRouter
from memlab.stages.route.prompted import PromptedRouter
from memlab.stages.route.rules import RuleRouter

__all__ = ["INTENTS", "QUESTION_TYPES", "IntentRouter", "PromptedRouter", "QueryRouter", "RouteIn", "RouteOut",
           "RuleRouter", "TfidfRouter", "query_signals"]
