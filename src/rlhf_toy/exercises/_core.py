r"""练习检查器的公共部分：把用例喂给读者的函数，与参考实现比较值和梯度，在第一个不符处停下并用中文解释。

一个练习（`Exercise`）由参考实现、一串用例（`Case`）和一串常见错误（`Mistake`）组成。检查按用例的顺序进行，
每个用例先比较值、再比较梯度；第一处不符时，把同一个用例交给每个常见错误的实现，谁的输出与读者的输出一致，
就报告谁的说明（“常见原因”）；都不一致时，报告用例自己的说明或通用的说明。每条报告都有一个稳定的键
（`CheckResult.key`），测试按键断言，不比较中文全文。
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from rlhf_toy._checks import shape_str

GENERIC_KEYS = ("not_implemented", "signature", "raised", "bad_output", "shape", "no_grad", "value", "grad")
"""所有检查器共有的报告键：还没实现、签名不符、抛出异常、返回值结构不对、形状不对、没有梯度、值不对、梯度不对。"""

_GENERIC_HINTS = {
    "raised": "参考实现在这个输入上正常返回；先在这个输入上单独调用你的函数，看异常从哪一行来。",
    "value": "这个输入上没有对上任何一个常见错误。对照本章的公式逐项检查，先从最小的输入手算一遍。",
    "grad": "值是对的，梯度却不对：常见的原因是某一步用了 `.item()`、`.detach()`、`torch.tensor(...)` 或原地修改，"
    "或者把该由 `torch.where` 选掉的位置乘了 0。",
    "no_grad": "输出与输入之间的计算图断了：某一步用了 `.item()`、`.detach()`、`.tolist()`、`torch.tensor(...)` "
    "或 `torch.no_grad()`，优化器拿不到梯度。",
}


class OutputError(Exception):
    """读者函数的返回值结构不对（由练习的 `outputs` 函数抛出，信息是中文说明）。"""


@dataclass(frozen=True)
class Case:
    """一个用例：按关键字传给函数的输入，以及它检查什么。

    Attributes:
        label: 中文短语，说明这个用例检查什么（写进报告与通过时的覆盖列表）。
        inputs: 关键字参数；张量每次调用前都会复制，读者原地修改也不影响后面的比较。
        grad: 要求梯度的输入名；非空时比较主输出之和对这些输入的梯度。
        key: 边界用例自己的报告键；这个用例失败且没有对上常见错误时，报告它而不是通用的 `value`。
        hint: 与 `key` 配套的说明。
        atol: 覆盖练习的绝对容差（例如组内奖励全相同时允许均值的舍入误差）。
    """

    label: str
    inputs: dict[str, Any]
    grad: tuple[str, ...] = ()
    key: str | None = None
    hint: str | None = None
    atol: float | None = None


@dataclass(frozen=True)
class Mistake:
    """一个常见错误：一份带着这个错误的实现，以及它背后的原因。

    Attributes:
        key: 稳定的报告键（测试按它断言）。
        hint: 中文说明：症状背后通常是什么错误、为什么错、怎么改（来自各章的“常见错误”）。
        fn: 带着这个错误的实现，签名同参考实现；读者的输出与它一致时报告 `hint`。
    """

    key: str
    hint: str
    fn: Callable[..., Any]


@dataclass(frozen=True)
class Exercise:
    """一道练习：参考实现、用例、常见错误，以及怎样从返回值里取出要比较的量。

    Attributes:
        name: 函数名（不带 `my_`），例如 `"group_advantages"`；检查器叫 `check_<name>`。
        reference: 参考实现。
        cases: 用例，按从简单到边界的顺序。
        outputs: 把返回值变成 `{名字: 张量}`（第一个是主输出，梯度对它的和求）；结构不对时抛 `OutputError`。
        mistakes: 常见错误，按诊断优先级排列（几个错误都对得上时报告靠前的）。
        atol: 绝对容差。
        rtol: 相对容差。
    """

    name: str
    reference: Callable[..., Any]
    cases: tuple[Case, ...]
    outputs: Callable[[Any], dict[str, Tensor]]
    mistakes: tuple[Mistake, ...] = ()
    atol: float = 1e-5
    rtol: float = 1e-4

    @property
    def keys(self) -> tuple[str, ...]:
        """这道练习可能报告的全部键：通用键、边界用例的键与常见错误的键。"""
        case_keys = tuple(dict.fromkeys(c.key for c in self.cases if c.key))
        generic = GENERIC_KEYS if any(c.grad for c in self.cases) else tuple(k for k in GENERIC_KEYS if "grad" not in k)
        return generic + case_keys + tuple(m.key for m in self.mistakes)


@dataclass
class CheckResult:
    """一次检查的结果；`bool(result)` 就是 `result.passed`。

    Attributes:
        exercise: 练习名，例如 `"group_advantages"`。
        passed: 是否全部通过。
        key: `"ok"`，或第一处不符的报告键（见 `Exercise.keys`）。
        report: 打印出来的中文报告。
        cases_passed: 通过了几个用例。
        case: 第一个不符的用例的 `label`（全部通过时为 `None`）。
    """

    exercise: str
    passed: bool
    key: str
    report: str
    cases_passed: int
    case: str | None = None

    def __bool__(self) -> bool:
        return self.passed


# ---- 输入与输出的整理 ----


def _fresh_inputs(case: Case) -> dict[str, Any]:
    inputs = {}
    for name, value in case.inputs.items():
        if isinstance(value, Tensor):
            value = value.detach().clone()
            if name in case.grad:
                value.requires_grad_(True)
        else:
            value = copy.deepcopy(value)
        inputs[name] = value
    return inputs


def as_tensor(name: str, x: Any) -> Tensor:
    """把返回值里的一个量变成张量（Python 数、布尔值也接受），否则抛 `OutputError`。"""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, bool | int | float):
        return torch.tensor(float(x))
    raise OutputError(f"{name} 应是张量或数，实际是 {type(x).__name__}")


def loss_outputs(ret: Any) -> dict[str, Tensor]:
    """返回标量损失的练习：接受 `loss` 或 `(loss, metrics)`，只取损失。"""
    loss = ret[0] if isinstance(ret, tuple) and len(ret) == 2 and isinstance(ret[1], dict) else ret
    return {"loss": as_tensor("loss", loss)}


def loss_and_metrics(metric_names: Sequence[str]) -> Callable[[Any], dict[str, Tensor]]:
    """返回 `(loss, metrics)` 的练习：取损失与 `metric_names` 里的指标（其余指标不看）。"""

    def outputs(ret: Any) -> dict[str, Tensor]:
        if not (isinstance(ret, tuple) and len(ret) == 2 and isinstance(ret[1], dict)):
            raise OutputError(f"应返回 (loss, metrics)，metrics 是含 {', '.join(metric_names)} 的字典")
        out = loss_outputs(ret[0])
        for name in metric_names:
            if name not in ret[1]:
                raise OutputError(f"metrics 里缺少 {name!r}（已有：{', '.join(map(repr, ret[1])) or '无'}）")
            out[name] = as_tensor(name, ret[1][name]).detach()
        return out

    return outputs


def tensor_output(name: str) -> Callable[[Any], dict[str, Tensor]]:
    """返回一个张量的练习。"""

    def outputs(ret: Any) -> dict[str, Tensor]:
        return {name: as_tensor(name, ret)}

    return outputs


# ---- 打印 ----


def _number(v: float) -> str:
    if v == 0:
        return "0.0"  # 不写 −0.0
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 1e6:
        return f"{v:.1f}"
    if abs(v) >= 1e4 or abs(v) < 1e-3:
        return f"{v:.3e}"
    return f"{v:.4f}"


def fmt(x: Any, indent: int = 0) -> str:
    """把输入或输出写成人读的样子：张量写成嵌套列表（4 位小数），二维张量一行一行写。"""
    if isinstance(x, Tensor):
        x = x.detach()
        if x.dtype == torch.bool or not x.is_floating_point():
            values = x.tolist()
            return (
                str(values)
                if x.dim() < 2
                else ("\n" + " " * indent).join(
                    ("[" if i == 0 else " ") + str(row) + ("]" if i == len(values) - 1 else ",")
                    for i, row in enumerate(values)
                )
            )
        if x.dim() == 0:
            return _number(x.item())
        if x.dim() == 1:
            return "[" + ", ".join(_number(v) for v in x.tolist()) + "]"
        rows = [fmt(row) for row in x]
        return ("\n" + " " * indent).join(
            ("[" if i == 0 else " ") + row + ("]" if i == len(rows) - 1 else ",") for i, row in enumerate(rows)
        )
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, list) and x and all(isinstance(v, float) for v in x):
        return "[" + ", ".join(_number(v) for v in x) + "]"
    return repr(x)


def _inputs_block(case: Case) -> str:
    lines = []
    for name, value in case.inputs.items():
        prefix = f"    {name} = "
        lines.append(prefix + fmt(value, indent=len(prefix)))
    return "\n".join(lines)


# ---- 运行与比较 ----


@dataclass
class _Run:
    values: dict[str, Tensor] = field(default_factory=dict)
    grads: dict[str, Tensor] = field(default_factory=dict)
    error: BaseException | None = None
    key: str | None = None  # bad_output / shape / no_grad
    detail: str = ""


def _run(fn: Callable[..., Any], exercise: Exercise, case: Case, want: _Run | None) -> _Run:
    inputs = _fresh_inputs(case)
    run = _Run()
    try:
        ret = fn(**inputs)
        run.values = exercise.outputs(ret)
    except OutputError as e:
        run.key, run.detail = "bad_output", str(e)
        return run
    except Exception as e:  # noqa: BLE001 - 读者的任何异常都要报告，而不是让检查本身崩掉
        run.error = e
        return run
    if want is not None:
        for name, w in want.values.items():
            got = run.values[name]
            if got.shape != w.shape:
                run.key = "shape"
                run.detail = f"{name} 的形状是 {shape_str(got.shape)}，期望 {shape_str(w.shape)}"
                return run
    if case.grad:
        main = next(iter(run.values.values()))
        if not main.requires_grad:
            run.key = "no_grad"
            return run
        leaves = [inputs[n] for n in case.grad]
        grads = torch.autograd.grad(main.sum(), leaves, allow_unused=True)
        run.grads = {
            n: torch.zeros_like(x) if g is None else g for n, x, g in zip(case.grad, leaves, grads, strict=True)
        }
    return run


def _close(a: Tensor, b: Tensor, atol: float, rtol: float) -> bool:
    if a.shape != b.shape:
        return False
    a, b = a.detach().double(), b.detach().double()
    return bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))


def _agrees(exercise: Exercise, case: Case, want: _Run, got: _Run) -> bool:
    atol = exercise.atol if case.atol is None else case.atol
    if got.error is not None or got.key is not None:
        return False
    pairs = [(want.values[n], got.values.get(n)) for n in want.values] + [
        (want.grads[n], got.grads.get(n)) for n in want.grads
    ]
    return all(g is not None and _close(g, w, atol, exercise.rtol) for w, g in pairs)


def _quiet_run(fn: Callable[..., Any], exercise: Exercise, case: Case) -> _Run | None:
    try:
        with warnings.catch_warnings(), torch.random.fork_rng():
            warnings.simplefilter("ignore")
            return _run(fn, exercise, case, None)
    except Exception:  # noqa: BLE001 - 常见错误的实现在边界输入上可以出错
        return None


_FIRST_FAILURE: dict[tuple[str, str], int] = {}


def _first_failure(exercise: Exercise, mistake: Mistake) -> int:
    """常见错误的实现第一次与参考实现不一致的用例下标（结果缓存：用例与实现都是固定的）。"""
    memo = (exercise.name, mistake.key)
    if memo not in _FIRST_FAILURE:
        index = len(exercise.cases)
        for i, case in enumerate(exercise.cases):
            want, got = _run(exercise.reference, exercise, case, None), _quiet_run(mistake.fn, exercise, case)
            if got is None or not _agrees(exercise, case, want, got):
                index = i
                break
        _FIRST_FAILURE[memo] = index
    return _FIRST_FAILURE[memo]


def _diagnose(
    exercise: Exercise, index: int, case: Case, got: _Run, kind: str, name: str, atol: float
) -> Mistake | None:
    """找出与读者输出一致的常见错误。

    候选是在前面的用例上都对（与读者一样）的错误实现；失败的那个量必须与读者一致，其余量一致得越多越优先。
    """
    best, best_score = None, -1
    for mistake in exercise.mistakes:
        if _first_failure(exercise, mistake) < index:
            continue
        run = _quiet_run(mistake.fn, exercise, case)
        if run is None:
            continue
        if run.error is not None or run.key is not None:
            continue
        table = run.values if kind == "value" else run.grads
        mine = got.values if kind == "value" else got.grads
        if name not in table or not _close(table[name], mine[name], atol, exercise.rtol):
            continue
        score = sum(
            _close(run.values[n], got.values[n], atol, exercise.rtol) for n in got.values if n in run.values
        ) + sum(_close(run.grads[n], got.grads[n], atol, exercise.rtol) for n in got.grads if n in run.grads)
        if score > best_score:
            best, best_score = mistake, score
    return best


def _show(label: str, x: Tensor) -> str:
    text = fmt(x, indent=4)
    return f"  {label}：{text}" if "\n" not in text else f"  {label}：\n    {text}"


def _grad_name(main: str, wrt: str) -> str:
    return f"∂{main}/∂{wrt}"


def _covered(exercise: Exercise, with_grad: bool) -> str:
    labels = "；".join(c.label for c in exercise.cases)
    what = "值与梯度" if with_grad else "值"
    return (
        f"check_{exercise.name} 通过：{len(exercise.cases)} 个用例的{what}都与参考实现一致"
        f"（atol = {exercise.atol:g}，rtol = {exercise.rtol:g}）。\n覆盖：{labels}。"
    )


def run_check(exercise: Exercise, your_fn: Callable[..., Any], *, verbose: bool = True) -> CheckResult:
    """按用例顺序检查 `your_fn`，在第一处不符时停下；打印并返回 `CheckResult`。

    Args:
        exercise: 练习。
        your_fn: 读者的函数，参数名同参考实现（检查按关键字传参）。
        verbose: `False` 时不打印，只返回结果。

    Returns:
        检查结果；读者的函数出错或算错时也不抛异常，而是写进报告。

    Raises:
        ValueError: `your_fn` 不可调用。
    """
    if not callable(your_fn):
        raise ValueError(f"your_fn 应是函数（可调用对象），实际是 {type(your_fn).__name__}")
    result = _check(exercise, your_fn)
    if verbose:
        print(result.report)
    return result


def _fail(exercise: Exercise, i: int, case: Case, key: str, body: str) -> CheckResult:
    head = f"check_{exercise.name} 未通过：第 {i + 1}/{len(exercise.cases)} 个用例“{case.label}”"
    report = f"{head}{body}"
    return CheckResult(exercise.name, False, key, report, cases_passed=i, case=case.label)


def _check(exercise: Exercise, your_fn: Callable[..., Any]) -> CheckResult:
    with_grad = False
    for i, case in enumerate(exercise.cases):
        atol = exercise.atol if case.atol is None else case.atol
        want = _run(exercise.reference, exercise, case, None)
        if want.error is not None or want.key is not None:  # 练习自己的错误：不该发生
            raise RuntimeError(f"参考实现在用例 {case.label!r} 上出错：{want.error or want.detail}")
        with torch.random.fork_rng():
            got = _run(your_fn, exercise, case, want)
        inputs = "\n  输入：\n" + _inputs_block(case)
        if isinstance(got.error, NotImplementedError):
            report = (
                f"check_{exercise.name}：函数还没有实现（抛出了 NotImplementedError）。"
                f"把 `raise NotImplementedError` 换成你的实现，再运行这一格。"
            )
            return CheckResult(exercise.name, False, "not_implemented", report, cases_passed=0, case=case.label)
        mismatch = _signature_mismatch(your_fn, case)
        if mismatch is not None:
            names = ", ".join(case.inputs)
            body = (
                f"调用时参数对不上：TypeError: {mismatch}\n"
                f"  检查按关键字传参（{names}），参数名要与参考实现相同；用不到的参数可以用 **kwargs 收下。"
            )
            return _fail(exercise, i, case, "signature", "：" + body)
        if got.error is not None:
            key, hint = (case.key, case.hint) if case.key else ("raised", _GENERIC_HINTS["raised"])
            body = f"调用时抛出 {type(got.error).__name__}: {got.error}{inputs}\n  常见原因：{hint}"
            return _fail(exercise, i, case, key, "：" + body)
        if got.key in ("bad_output", "shape"):
            return _fail(exercise, i, case, got.key, f"的返回值不对：{got.detail}。{inputs}")
        for name, w in want.values.items():
            g = got.values[name]
            if _close(g, w, atol, exercise.rtol):
                continue
            mistake = _diagnose(exercise, i, case, got, "value", name, atol)
            key, hint = _explain(mistake, case, "value")
            body = f"的 {name} 不对。{inputs}\n{_show('期望 ' + name, w)}\n{_show('得到 ' + name, g)}"
            return _fail(exercise, i, case, key, f"{body}\n  常见原因：{hint}")
        if case.grad:
            with_grad = True
            main = next(iter(want.values))
            if got.key == "no_grad":
                body = (
                    f"的输出 {main} 不带梯度（requires_grad=False）。{inputs}\n  常见原因：{_GENERIC_HINTS['no_grad']}"
                )
                return _fail(exercise, i, case, "no_grad", body)
            for name, w in want.grads.items():
                g = got.grads[name]
                if _close(g, w, atol, exercise.rtol):
                    continue
                mistake = _diagnose(exercise, i, case, got, "grad", name, atol)
                key, hint = _explain(mistake, case, "grad")
                label = _grad_name(main if want.values[main].dim() == 0 else f"sum({main})", name)
                body = f"的梯度 {label} 不对（值是对的）。{inputs}\n{_show('期望 ' + label, w)}\n{_show('得到 ' + label, g)}"
                return _fail(exercise, i, case, key, f"{body}\n  常见原因：{hint}")
    return CheckResult(exercise.name, True, "ok", _covered(exercise, with_grad), cases_passed=len(exercise.cases))


def _signature_mismatch(fn: Callable[..., Any], case: Case) -> str | None:
    """读者函数的签名收不下这个用例的关键字参数时，返回 Python 的说明。"""
    try:
        inspect.signature(fn).bind(**case.inputs)
    except TypeError as e:
        return str(e)
    except ValueError:  # 没有签名信息的可调用对象（某些内置函数）：只能调用了再说
        return None
    return None


def _explain(mistake: Mistake | None, case: Case, kind: str) -> tuple[str, str]:
    if mistake is not None:
        return mistake.key, mistake.hint
    if case.key:
        return case.key, case.hint or ""
    return kind, _GENERIC_HINTS[kind]
