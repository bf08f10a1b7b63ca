"""The real-model failure set: each workload is a model, its inputs, a failure class and a device.

`python -m minifier.examples.dump --out DIR --workload NAME` makes PyTorch dump one of them; the
benchmark (bench/run.py --set real) and tests/test_real_models.py use this table. Names read
`<source>-<model><layers>-<failure>`; GPU workloads start with `cuda-`.

Failure classes: Inductor's injected test bugs (relu: compile_error, runtime_error, accuracy; log1p:
accuracy), and real failures made by a fragment spliced into the model (real_models.FRAGMENTS):
real Inductor/AOTI bugs of torch 2.13, custom ops whose fake kernels lie, torch.cond, and the user
Triton kernel that reads out of bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import real_models as rm
from .models import TOY_MODELS, build

CUSTOM_OPS = "minifier.examples.custom_ops"
TRITON_OPS = "minifier.examples.triton_ops"


@dataclass(frozen=True)
class FailureClass:
    injection: str | None = (
        None  # "relu:<bug>", "log1p:accuracy" or both joined by "+" (Inductor's *_TESTING_ONLY flags)
    )
    fragment: str | None = None  # key of real_models.FRAGMENTS, spliced at the middle activation
    act: str = "gelu"  # the models' activation (relu where the relu injection must find one)
    accuracy: bool = False  # needs PyTorch's repro level 4 (an fp64-checked extra compile)
    # Kills the user's process before PyTorch can dump after the failure (a C++ throw inside an OpenMP region
    # aborts it; a device-side fault leaves CUDA unusable): repro level 3, the launcher written before compiling.
    kills_process: bool = False
    dynamic: bool = False  # exported with torch.export.Dim batch and token dims
    imports: tuple[str, ...] = ()  # modules every worker imports first (custom ops in the program)
    origin: str = "injected"  # "injected" (a *_TESTING_ONLY flag), "torch" (a bug torch 2.13 has), "user code"
    configs: tuple[tuple[str, object], ...] = ()  # Inductor configs a user set that meet the bug (a debug switch)
    note: str = ""


FAILURES: dict[str, FailureClass] = {
    "relu-compile_error": FailureClass(injection="relu:compile_error", act="relu"),
    "relu-runtime_error": FailureClass(injection="relu:runtime_error", act="relu", kills_process=True),
    "relu-accuracy": FailureClass(injection="relu:accuracy", act="relu", accuracy=True),
    "log1p-accuracy": FailureClass(
        injection="log1p:accuracy", act="mish", accuracy=True, note="mish/softplus decompose to log1p"
    ),
    "index_put_mask-keyerror": FailureClass(
        fragment="masked_mix",
        origin="torch",
        note="CPU outer-loop fusion KeyError: 'bufN' (pytorch/pytorch#188228, #196570)",
    ),
    "complex_sub-proxy_executor": FailureClass(
        fragment="spectral_detrend",
        origin="torch",
        note="complex sub via the AOTI proxy executor: ints consumed mismatch (pytorch/pytorch#189189)",
    ),
    "complex_scalar-assertion": FailureClass(
        fragment="complex_recenter",
        origin="torch",
        note="complex tensor minus a complex Python scalar: AssertionError: got <class 'complex'>",
    ),
    "complex_full-assertion": FailureClass(
        fragment="complex_phase",
        origin="torch",
        note="torch.full with a complex fill value: a messageless AssertionError in the C++ wrapper, while compiling",
    ),
    "lifted_cumsum-indexerror": FailureClass(
        fragment="constant_ramp",
        origin="torch",
        note="cumsum of a lifted 0-dim tensor constant: IndexError while lowering (pytorch/pytorch#193265)",
    ),
    "debug_sync-cpp_compile_error": FailureClass(
        configs=(("triton.debug_sync_graph", True),),
        origin="torch",
        note="triton.debug_sync_graph writes its Python sync line (`pass` on a CPU, `torch.cuda.synchronize()` on a "
        "GPU) into AOTI's C++ wrapper: a C++ compile error (pytorch/pytorch#140219, #140220)",
    ),
    "uint8_any-accuracy": FailureClass(
        fragment="any_gate",
        accuracy=True,
        origin="torch",
        note="any of a uint8 tensor is bool under Inductor, uint8 in eager: uint8 arithmetic after it stops "
        "wrapping (pytorch/pytorch#198081)",
    ),
    "zero_sign-accuracy": FailureClass(
        fragment="zero_sign_gate",
        accuracy=True,
        origin="torch",
        note="x + zeros_like(x) keeps -0.0 under Inductor (eager: +0.0), so 1/x flips from +inf to -inf "
        "(pytorch/pytorch#189799)",
    ),
    "floor_div-accuracy": FailureClass(
        fragment="bucket_residual",
        accuracy=True,
        origin="torch",
        note="float floor division as floor(a / b): 0.5 // 0.1 is 5.0 under Inductor, 4.0 in eager "
        "(pytorch/pytorch#197895)",
    ),
    "fp8_where-promotion": FailureClass(
        fragment="float8_select",
        origin="torch",
        note="where between float8 tensors: 'Promotion for Float8 Types is not supported' while lowering",
    ),
    "lying_fake-accuracy": FailureClass(
        fragment="row_scale_norm",
        accuracy=True,
        imports=(CUSTOM_OPS,),
        origin="user code",
        note="fake kernel returns empty_like(x) for a (..., 1) result",
    ),
    "dynamic_fake-accuracy": FailureClass(
        fragment="token_pool",
        accuracy=True,
        dynamic=True,
        imports=(CUSTOM_OPS,),
        origin="user code",
        note="fake kernel wrong only for symbolic sizes; static export passes",
    ),
    "cache-relu-compile_error": FailureClass(
        injection="relu:compile_error",
        fragment="cache_write",
        note="the only relu reads a buffer the model writes in forward (a KV cache): candidates keep it a buffer",
    ),
    "cond-relu-compile_error": FailureClass(
        injection="relu:compile_error", fragment="cond_gate", note="the only relu is inside a torch.cond branch"
    ),
    "triton_oob": FailureClass(
        fragment="triton_out_of_bounds",
        kills_process=True,
        imports=(TRITON_OPS,),
        origin="user code",
        note="user Triton kernel reads out of bounds",
    ),
    "dynamic-relu-compile_error": FailureClass(
        injection="relu:compile_error", act="relu", dynamic=True, note="exported with Dim batch and token dims"
    ),
    "dynamic-relu-accuracy": FailureClass(
        injection="relu:accuracy",
        act="relu",
        accuracy=True,
        dynamic=True,
        note="exported with Dim batch and token dims: the probe compiles a package, as for its candidates",
    ),
    "relu_and_log1p-accuracy": FailureClass(
        injection="relu:accuracy+log1p:accuracy",
        accuracy=True,
        note="PyTorch's test_accuracy_vs_strict_accuracy: --strict-accuracy ends at log1p, --accuracy at relu",
    ),
}


@dataclass(frozen=True)
class Workload:
    name: str
    model: str  # an HF model (real_models.HF_MODELS), "nn_transformer", or a torchvision classifier
    layers: int
    failure: str
    device: str = "cpu"

    @property
    def failure_class(self) -> FailureClass:
        return FAILURES[self.failure]

    @property
    def big(self) -> bool:
        """Gigabytes of weights (bench/run.py's `--set big`, never among the others: its compiles take minutes)."""
        return self.model in rm.LLM_SHAPES or self.model in rm.WIDE_MLPS

    @property
    def family(self) -> str:
        return FAMILIES.get(self.model, "vision (torchvision)")

    @property
    def repro_level(self) -> int:
        failure = self.failure_class
        if failure.accuracy and not failure.dynamic:
            return 4
        # PyTorch's level-4 check re-exports the program with static shapes, so it never sees a failure that
        # needs dynamic ones: such a workload is dumped before compiling and checked with --accuracy.
        return 3 if failure.kills_process or failure.dynamic else 2

    @property
    def compile_repro_level(self) -> int:
        """torch.compile's (its after_aot dump checks accuracy at the symbolic sizes it traced; its level 3 dumps
        before each run, too late for a compile error)."""
        failure = self.failure_class
        return 4 if failure.accuracy else 3 if failure.kills_process else 2

    @property
    def imports(self) -> tuple[str, ...]:
        return self.failure_class.imports

    @property
    def accuracy_flag(self) -> bool:
        """An accuracy failure dumped below level 4: its launcher says accuracy=False, runs need --accuracy."""
        return self.failure_class.accuracy and self.repro_level != 4

    @property
    def dump_args(self) -> tuple[str, ...]:
        """`python -m minifier.examples.dump` arguments for it. A CUDA failure that kills the process (a
        device-side assert) poisons the CUDA context, and PyTorch's dump after it dies copying the weights
        off the GPU, over the good dump written before compiling (a corrupt .pt2, torch 2.11):
        such a workload is dumped the way a user would, under `aoti-minify capture`."""
        capture = ("--capture",) if self.device == "cuda" and self.failure_class.kills_process else ()
        return ("--workload", self.name, *capture)

    @property
    def run_args(self) -> tuple[str, ...]:
        """What `aoti-minify run/minify` needs beyond the launcher's own settings."""
        accuracy = ("--accuracy",) if self.accuracy_flag else ()
        return accuracy + tuple(arg for module in self.imports for arg in ("--import", module))


FAMILIES = {
    "bert": "encoder (HF)",
    "roberta": "encoder (HF)",
    "vit": "vision encoder (HF)",
    "gpt2": "decoder (HF)",
    "llama": "decoder (HF)",
    "qwen2": "decoder (HF)",
    "t5": "encoder-decoder (HF)",
    "bart": "encoder-decoder (HF)",
    "nn_transformer": "torch.nn building blocks",
    "nn_mlp": "torch.nn building blocks",
    "nn_cnn": "torch.nn building blocks",
    "wide_mlp": "torch.nn building blocks",
    "wider_mlp": "torch.nn building blocks",
    "llama2_7b": "decoder (HF), Llama-2-7B's shape",
    "llama2_13b": "decoder (HF), Llama-2-13B's shape",
    "parity": "toy (PyTorch's own minifier test)",
}


def _w(name: str, model: str, layers: int, failure: str, device: str = "cpu") -> Workload:
    return Workload(name, model, layers, failure, device)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        # one family at three sizes (about 100, 500 and 2000 compute nodes): queries against log(n)
        _w("hf-bert3-relu-compile_error", "bert", 3, "relu-compile_error"),
        _w("hf-bert20-relu-compile_error", "bert", 20, "relu-compile_error"),
        _w("hf-bert85-relu-compile_error", "bert", 85, "relu-compile_error"),
        _w("hf-gpt2-relu-compile_error", "gpt2", 2, "relu-compile_error"),
        _w("hf-t5-relu-compile_error", "t5", 2, "relu-compile_error"),
        _w("hf-llama-relu-runtime_error", "llama", 2, "relu-runtime_error"),
        _w("hf-bart-relu-compile_error", "bart", 2, "relu-compile_error"),
        _w("hf-vit-relu-accuracy", "vit", 4, "relu-accuracy"),
        _w("hf-roberta-log1p-accuracy", "roberta", 3, "log1p-accuracy"),
        _w("hf-bert-index_put_mask-keyerror", "bert", 4, "index_put_mask-keyerror"),
        _w("hf-qwen2-complex_sub-proxy_executor", "qwen2", 2, "complex_sub-proxy_executor"),
        _w("hf-vit-complex_scalar-assertion", "vit", 4, "complex_scalar-assertion"),
        _w("hf-bert-lifted_cumsum-indexerror", "bert", 4, "lifted_cumsum-indexerror"),
        _w("hf-bert-uint8_any-accuracy", "bert", 4, "uint8_any-accuracy"),
        _w("hf-bert-debug_sync-cpp_compile_error", "bert", 4, "debug_sync-cpp_compile_error"),
        _w("hf-bert-fp8_where-promotion", "bert", 4, "fp8_where-promotion"),
        _w("hf-bert-zero_sign-accuracy", "bert", 4, "zero_sign-accuracy"),
        _w("hf-bert-floor_div-accuracy", "bert", 4, "floor_div-accuracy"),
        _w("hf-roberta-lying_fake-accuracy", "roberta", 3, "lying_fake-accuracy"),
        _w("hf-bert-dynamic_fake-accuracy", "bert", 4, "dynamic_fake-accuracy"),
        _w("nn-transformer-relu-compile_error", "nn_transformer", 4, "relu-compile_error"),
        _w("nn-transformer-cond-relu-compile_error", "nn_transformer", 4, "cond-relu-compile_error"),
        # in-place ops (ReLU(inplace=True), residual +=) as torchvision's CNNs have them
        _w("nn-cnn-relu-accuracy", "nn_cnn", 1, "relu-accuracy"),
        # the same failures in torch.nn's smallest model (Linear, activation, Linear), for the tests
        _w("nn-mlp-dynamic_fake-accuracy", "nn_mlp", 1, "dynamic_fake-accuracy"),
        _w("nn-mlp-dynamic-relu-accuracy", "nn_mlp", 1, "dynamic-relu-accuracy"),
        _w("nn-mlp-dynamic-relu-compile_error", "nn_mlp", 1, "dynamic-relu-compile_error"),
        _w("nn-mlp-cond-relu-compile_error", "nn_mlp", 1, "cond-relu-compile_error"),
        _w("nn-mlp-cache-relu-compile_error", "nn_mlp", 1, "cache-relu-compile_error"),
        _w("nn-mlp-index_put_mask-keyerror", "nn_mlp", 1, "index_put_mask-keyerror"),
        _w("nn-mlp-complex_sub-proxy_executor", "nn_mlp", 1, "complex_sub-proxy_executor"),
        _w("nn-mlp-complex_scalar-assertion", "nn_mlp", 1, "complex_scalar-assertion"),
        _w("nn-mlp-complex_full-assertion", "nn_mlp", 1, "complex_full-assertion"),
        _w("nn-mlp-lifted_cumsum-indexerror", "nn_mlp", 1, "lifted_cumsum-indexerror"),
        _w("nn-mlp-uint8_any-accuracy", "nn_mlp", 1, "uint8_any-accuracy"),
        _w("nn-mlp-debug_sync-cpp_compile_error", "nn_mlp", 1, "debug_sync-cpp_compile_error"),
        _w("nn-mlp-fp8_where-promotion", "nn_mlp", 1, "fp8_where-promotion"),
        _w("nn-mlp-zero_sign-accuracy", "nn_mlp", 1, "zero_sign-accuracy"),
        _w("nn-mlp-floor_div-accuracy", "nn_mlp", 1, "floor_div-accuracy"),
        _w("toy-parity-relu_and_log1p-accuracy", "parity", 0, "relu_and_log1p-accuracy"),
        # the GPU machines (torch 2.11, torchvision 0.26, transformers 5.17): bench/run.py --device cuda --set real
        _w("cuda-tv-resnet18-relu-compile_error", "resnet18", 0, "relu-compile_error", "cuda"),
        _w("cuda-tv-mobilenet_v3_small-relu-compile_error", "mobilenet_v3_small", 0, "relu-compile_error", "cuda"),
        _w("cuda-tv-resnet18-relu-accuracy", "resnet18", 0, "relu-accuracy", "cuda"),
        _w("cuda-tv-regnet_y_400mf-relu-accuracy", "regnet_y_400mf", 0, "relu-accuracy", "cuda"),
        _w("cuda-tv-mobilenet_v3_small-relu-accuracy", "mobilenet_v3_small", 0, "relu-accuracy", "cuda"),
        _w("cuda-tv-resnet50-relu-compile_error", "resnet50", 0, "relu-compile_error", "cuda"),
        _w("cuda-tv-resnet50-relu-accuracy", "resnet50", 0, "relu-accuracy", "cuda"),
        _w("cuda-hf-bert3-relu-compile_error", "bert", 3, "relu-compile_error", "cuda"),
        _w("cuda-hf-bert20-relu-compile_error", "bert", 20, "relu-compile_error", "cuda"),
        _w("cuda-hf-llama-relu-runtime_error", "llama", 2, "relu-runtime_error", "cuda"),
        _w("cuda-hf-gpt2-triton_oob", "gpt2", 2, "triton_oob", "cuda"),
        _w("cuda-hf-qwen2-complex_sub-proxy_executor", "qwen2", 2, "complex_sub-proxy_executor", "cuda"),
        _w("cuda-nn-mlp-dynamic-relu-compile_error", "nn_mlp", 1, "dynamic-relu-compile_error", "cuda"),
        _w("cuda-nn-mlp-cond-relu-compile_error", "nn_mlp", 1, "cond-relu-compile_error", "cuda"),
        _w("cuda-nn-mlp-complex_sub-proxy_executor", "nn_mlp", 1, "complex_sub-proxy_executor", "cuda"),
        _w("cuda-hf-bert-debug_sync-cpp_compile_error", "bert", 4, "debug_sync-cpp_compile_error", "cuda"),
        # big models (issue 44): weights held once; 3 GiB of fp32 on a CPU (the wider one in the tests), Llama-2's
        # shapes in bf16 on a GPU
        _w("nn-wide_mlp48-relu-compile_error", "wide_mlp", 48, "relu-compile_error"),
        _w("nn-wider_mlp12-relu-compile_error", "wider_mlp", 12, "relu-compile_error"),
        _w("cuda-hf-llama2_7b16-relu-compile_error", "llama2_7b", 16, "relu-compile_error", "cuda"),
        _w("cuda-hf-llama2_7b32-relu-compile_error", "llama2_7b", 32, "relu-compile_error", "cuda"),
        _w("cuda-hf-llama2_13b40-relu-compile_error", "llama2_13b", 40, "relu-compile_error", "cuda"),
    ]
}


@dataclass
class Prepared:
    model: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: dict | tuple | None
    inductor_config: dict[str, object]
    repro_level: int
    compile_repro_level: int  # under torch.compile


def prepare(workload: Workload) -> Prepared:
    """The model on its device, its inputs, its export dims and the Inductor config that makes it fail."""
    failure = workload.failure_class
    torch.manual_seed(0)
    if workload.model in rm.LLM_SHAPES:
        model, inputs = rm.hf_llm(workload.model, workload.layers, failure.act, workload.device)
    elif workload.model in rm.HF_MODELS:
        model, inputs = rm.hf_model(workload.model, workload.layers, failure.act)
    elif workload.model in rm.WIDE_MLPS:
        model, inputs = rm.wide_mlp(workload.model, workload.layers, failure.act)
    elif workload.model == "nn_transformer":
        model, inputs = rm.nn_transformer(workload.layers, failure.act)
    elif workload.model == "nn_mlp":
        model, inputs = rm.nn_mlp(failure.act)
    elif workload.model == "nn_cnn":
        model, inputs = rm.nn_cnn()
    elif workload.model in TOY_MODELS:
        model, inputs = build(workload.model)
    else:
        model, inputs = rm.torchvision_model(workload.model)
    if failure.fragment:
        rm.splice(model, rm.FRAGMENTS[failure.fragment]())
    device = torch.device(workload.device)
    return Prepared(
        model=model.to(device),
        inputs=tuple(t.to(device) for t in inputs),
        dynamic_shapes=rm.batch_and_tokens() if failure.dynamic else None,
        inductor_config={**_injection(failure.injection, workload.device), **dict(failure.configs)},
        repro_level=workload.repro_level,
        compile_repro_level=workload.compile_repro_level,
    )


def _injection(injection: str | None, device: str) -> dict[str, object]:
    config: dict[str, object] = {}
    for one in injection.split("+") if injection else ():
        op, bug = one.split(":")
        backend = "triton" if device == "cuda" and op == "relu" else "cpp"
        config[f"{backend}.inject_{op}_bug_TESTING_ONLY"] = bug
    return config


def compute_nodes(program: torch.export.ExportedProgram) -> int:
    return sum(1 for node in program.graph.nodes if node.op == "call_function")
