"""同一份种子，在每台 x86-64 机器上打印同样的数字。

PyTorch 的 CPU 计算分别交给三套代码：矩阵乘法交给 MKL，GELU 交给 oneDNN，其余（softmax、LayerNorm、
融合的 Adam 等）是 ATen 自己的向量化内核。三者都在运行时按 CPU 选指令集，AVX-512 与 AVX2 的代码
舍入不同；训练几百步之后，末位的差别会放大成另一个模型。`numerics.env` 把三者各自固定下来（并固定为单线程），
本模块在 `import rlhf_toy` 时、在任何张量计算之前把这些设置写进环境变量。

已经自己设了某个变量的读者，以自己的为准（`os.environ.setdefault`）。ARM 机器上 ATen 会忽略
`ATEN_CPU_CAPABILITY` 并给出警告，MKL 与 oneDNN 的设置不起作用：数字会不同。

有一个运算这些设置管不住：浮点张量上的 `torch.sqrt` 交给 MKL 的向量数学库，其 `COMPATIBLE` 分支不是正确舍入的，
Intel 与 AMD 上末位不同。所以本包的每个 Adam/AdamW 都是 `fused=True`（融合内核用 IEEE 开方），标量开方用 `math.sqrt`；
`tests/test_numerics.py` 检查这一点，并逐个运算比对 `tests/numerics/expected.txt` 里的哈希。

本模块不导入 torch：它必须能在 torch 读这些变量之前运行。
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_FILE = Path(__file__).with_name("numerics.env")


def numeric_env() -> dict[str, str]:
    """读 `numerics.env`：本书固定的数值设置。

    Returns:
        变量名到取值的字典，例如 `{"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", ...}`。
    """
    settings = {}
    for line in ENV_FILE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings


def pin_numerics() -> dict[str, str]:
    """把本书的数值设置写进 `os.environ`（已有的变量不改），并返回生效的取值。

    必须在第一次张量计算之前调用：ATen、MKL、oneDNN 都在第一次用到时读这些变量（导入 torch 本身不读）。
    子进程（notebook 内核、演示、基准）继承这些环境变量。

    Returns:
        每个设置生效的取值（读者自己设过的，是读者的值）。

    Examples:
        >>> pin_numerics()["MKL_CBWR"] in ("COMPATIBLE", os.environ["MKL_CBWR"])
        True
    """
    for key, value in numeric_env().items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in numeric_env()}
