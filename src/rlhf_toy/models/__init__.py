"""奖励模型与价值模型：RLHF 四个模型里除策略与参考模型之外的两个（查表版本）。"""

from rlhf_toy.models.reward_table import TableRewardModel
from rlhf_toy.models.value_table import TableValueModel

__all__ = ["TableRewardModel", "TableValueModel"]
