"""rlhf_toy.studies.recipes: the recipe cells agree with each other (ch. 6's checklist prints them)."""

from __future__ import annotations

from rlhf_toy.studies.recipes import RECIPES, SETTINGS


def test_every_recipe_has_every_setting_with_a_source():
    for name, recipe in RECIPES.items():
        assert tuple(recipe) == SETTINGS, name
        assert all(cell.source for cell in recipe.values()), name


def test_optimizer_steps_per_generation_is_prompts_per_generation_over_prompts_per_step():
    # grpo.md, 动手前的清单: “DAPO 的一次生成要分 16 个优化步用完” (512 prompts kept per rollout, 32 per mini-batch).
    counted = 0
    for name, recipe in RECIPES.items():
        cells = [recipe[key].value for key in ("prompts_per_generation", "prompts_per_step", "steps_per_generation")]
        if all(isinstance(value, int) for value in cells):
            per_generation, per_step, steps = cells
            assert per_generation == per_step * steps, name
            counted += 1
    assert counted >= 3
    assert RECIPES["DAPO"]["steps_per_generation"].value == 16
    assert RECIPES["TRL 1.16 默认"]["steps_per_generation"].value == 1
