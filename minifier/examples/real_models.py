"""Real model code nobody in this repository wrote, with random weights, for the real-model workloads.

HF `transformers` models are built from small configs (nothing is downloaded), `torch.nn` building
blocks and torchvision classifiers as they ship. A failure that is not an injected Inductor bug comes
from a *fragment*: a few ops that trigger it, spliced into the model at its middle activation, so the
minifier has the whole model around the bug to cut away. Builders return (model, example inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.export import Dim

VOCAB, BATCH, TOKENS, WIDTH = 128, 2, 16, 32
Built = tuple[nn.Module, tuple[torch.Tensor, ...]]


class LastHidden(nn.Module):
    """HF models return ModelOutput objects; a workload exports the last hidden state."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, decoder_input_ids: torch.Tensor | None = None) -> torch.Tensor:
        if decoder_input_ids is None:
            return self.model(inputs).last_hidden_state
        return self.model(input_ids=inputs, decoder_input_ids=decoder_input_ids).last_hidden_state


def _ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, TOKENS))


def _hf_configs(layers: int, act: str) -> dict[str, Callable[[], object]]:
    import transformers as T

    heads = dict(num_attention_heads=2, max_position_embeddings=64, vocab_size=VOCAB)
    encoder = dict(hidden_size=WIDTH, num_hidden_layers=layers, intermediate_size=2 * WIDTH, hidden_act=act, **heads)
    decoder = dict(encoder, use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    seq2seq = dict(
        vocab_size=VOCAB, use_cache=False, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, bos_token_id=0
    )
    return {
        "bert": lambda: T.BertModel(T.BertConfig(**encoder)),
        "roberta": lambda: T.RobertaModel(T.RobertaConfig(**encoder, pad_token_id=1)),
        "gpt2": lambda: T.GPT2Model(
            T.GPT2Config(
                n_embd=WIDTH,
                n_layer=layers,
                n_head=2,
                vocab_size=VOCAB,
                n_positions=64,
                activation_function=act,
                use_cache=False,
                bos_token_id=0,
                eos_token_id=0,
            )
        ),
        "llama": lambda: T.LlamaModel(T.LlamaConfig(**decoder, num_key_value_heads=2)),
        "qwen2": lambda: T.Qwen2Model(T.Qwen2Config(**decoder, num_key_value_heads=1)),
        "t5": lambda: T.T5Model(
            T.T5Config(
                d_model=WIDTH, d_kv=16, d_ff=2 * WIDTH, num_layers=layers, num_heads=2, feed_forward_proj=act, **seq2seq
            )
        ),
        "bart": lambda: T.BartModel(
            T.BartConfig(
                d_model=WIDTH,
                encoder_layers=layers,
                decoder_layers=layers,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=2 * WIDTH,
                decoder_ffn_dim=2 * WIDTH,
                activation_function=act,
                max_position_embeddings=64,
                **seq2seq,
            )
        ),
        "vit": lambda: T.ViTModel(
            T.ViTConfig(
                image_size=32,
                patch_size=8,
                hidden_size=WIDTH,
                num_hidden_layers=layers,
                num_attention_heads=2,
                intermediate_size=2 * WIDTH,
                hidden_act=act,
            )
        ),
    }


HF_MODELS = ("bert", "roberta", "gpt2", "llama", "qwen2", "t5", "bart", "vit")


def hf_model(name: str, layers: int, act: str) -> Built:
    model = LastHidden(_hf_configs(layers, act)[name]()).eval()
    if name == "vit":
        return model, (torch.randn(BATCH, 3, 32, 32),)
    if name in ("t5", "bart"):
        return model, (_ids(), _ids())
    return model, (_ids(),)


# Llama-2's 7B and 13B shapes (hidden size, MLP size, heads; Llama-2-7B has 32 layers, 13B 40), random weights in
# bf16 on the GPU: what AOTInductor mostly ships. `layers` picks the depth, so a smaller model keeps the shape.
LLM_SHAPES = {"llama2_7b": (4096, 11008, 32), "llama2_13b": (5120, 13824, 40)}


def hf_llm(shape: str, layers: int, act: str, device: str) -> Built:
    """An LLM of a real shape, built where it runs (a 7B model in fp32 on the host would take 27 GB first)."""
    import transformers as T

    hidden, mlp, heads = LLM_SHAPES[shape]
    config = T.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        vocab_size=32000,
        max_position_embeddings=64,
        hidden_act=act,
        use_cache=False,
    )
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = LastHidden(T.LlamaModel(config)).eval()
    finally:
        torch.set_default_dtype(dtype)
    return model, (_ids().to(device),)


# Residual MLPs of fp32 Linear(width, width) layers, big models on a CPU: model name -> width. The wider one holds
# as many bytes in a quarter of the nodes, so its compiles (the tests') are shorter.
WIDE_MLPS = {"wide_mlp": 4096, "wider_mlp": 8192}


def wide_mlp(name: str, layers: int, act: str) -> Built:
    """A residual MLP of `layers` Linear(width, width) in fp32 (64 MiB of weights each at 4096, 256 MiB at 8192)."""
    width = WIDE_MLPS[name]
    activation = {"relu": nn.ReLU(), "gelu": nn.GELU()}[act]

    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear, self.act = nn.Linear(width, width), activation

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.act(self.linear(x))

    return nn.Sequential(*(Residual() for _ in range(layers))).eval(), (torch.randn(BATCH, 8, width),)


def nn_transformer(layers: int, act: str) -> Built:
    """torch.nn.TransformerEncoder; a named activation becomes its module, so fragments can splice into it."""
    activation = {"relu": nn.ReLU(), "gelu": nn.GELU()}[act]
    layer = nn.TransformerEncoderLayer(WIDTH, 2, 2 * WIDTH, dropout=0.0, activation=activation, batch_first=True)
    model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    return model, (torch.randn(BATCH, TOKENS, WIDTH),)


def nn_mlp(act: str) -> Built:
    """torch.nn building blocks at their smallest (Linear, activation, Linear), on (batch, tokens, width):
    a fragment spliced after its activation is nearly all the graph, which keeps the tests' compiles short."""
    activation = {"relu": nn.ReLU(), "gelu": nn.GELU(), "mish": nn.Mish()}[act]
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), activation, nn.Linear(WIDTH, WIDTH)).eval()
    return model, (torch.randn(BATCH, TOKENS, WIDTH),)


class ResidualCnn(nn.Module):
    """torch.nn's layers as torchvision's ResNets compose them (no torchvision here: see torchvision_model):
    conv, batch norm, ReLU(inplace=True) and a residual `+=`, so the exported graph computes in place."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()

        def conv_bn(inp: int) -> list[nn.Module]:
            return [nn.Conv2d(inp, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)]

        self.stem = nn.Sequential(*conv_bn(3), nn.ReLU(inplace=True))
        self.block = nn.Sequential(*conv_bn(width), nn.ReLU(inplace=True), *conv_bn(width))
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        out = self.block(x)
        out += x
        out = self.relu(out)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(out, 1), 1))


def nn_cnn() -> Built:
    return ResidualCnn().eval(), (torch.randn(BATCH, 3, 16, 16),)


def torchvision_model(name: str) -> Built:
    """A torchvision classifier (GPU machine only: PyPI's torchvision does not load with this CPU torch), its batch
    norms' statistics taken from a batch of random images, as training leaves them at the scale of the activations.
    With the initial ones (mean 0, variance 1) MobileNetV3-small's activations shrink through its layers to an
    output of 5e-10, where PyTorch's accuracy check sees no injected bug (relu + 1 moved it by 1.6e-7)."""
    import torchvision.models as tv

    model = getattr(tv, name)(num_classes=10)
    calibrate_batch_norms(model, torch.randn(8, 3, 64, 64))
    return model.eval(), (torch.randn(1, 3, 64, 64),)


def calibrate_batch_norms(model: nn.Module, batch: torch.Tensor) -> None:
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # the batch's own statistics, not a step towards them
    model.train()
    with torch.no_grad():
        model(batch)
    for norm, momentum in zip(norms, momenta):
        norm.momentum = momentum


# --- fragments: the ops of a real bug, spliced into a model -------------------------------------------


class MaskedMix(nn.Module):
    """Token mixing under an additive mask built with index_put, the way users build masks.

    Inductor's CPU outer-loop fusion then raises `KeyError: 'buf<N>'` (pytorch/pytorch#188228, #196570):
    the mask's index_put is a mutation, and the fused softmax reads the buffer it mutates.
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        t = h.mean(0)
        n = t.shape[0]
        scores = t @ t.T / math.sqrt(t.shape[1])
        mask = torch.full((n, n), -10000.0, device=h.device)
        i = torch.arange(n, device=h.device)
        mask[i.unsqueeze(0), i.unsqueeze(1)] = 0
        return h + torch.softmax(scores + mask, dim=-1) @ h


class SpectralDetrend(nn.Module):
    """Removes each channel's mean spectrum (complex subtraction).

    AOTI runs complex `aten.sub.Tensor` through its proxy executor, which disagrees with the generated
    wrapper about the `alpha` argument: `Mismatch between ints consumed and num_ints`
    (pytorch/pytorch#189189).
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        spectrum = torch.fft.rfft(h, dim=1)
        spectrum = spectrum - spectrum.mean(dim=1, keepdim=True)
        return h + torch.fft.irfft(spectrum, n=h.shape[1], dim=1)


class ComplexRecenter(nn.Module):
    """Reads feature pairs as complex numbers (as complex rotary embeddings do) and moves them by a constant.

    Inductor cannot lower subtracting the complex Python scalar (adding or multiplying it works):
    `AssertionError: got <class 'complex'>`, raised while compiling.
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        pairs = torch.view_as_complex(h.reshape(*h.shape[:-1], -1, 2))
        return torch.view_as_real(pairs - (0.1 + 0.2j)).flatten(-2)


class ComplexPhase(nn.Module):
    """Rotates feature pairs, read as complex numbers, by one fixed phase built with torch.full.

    The complex fill value reaches the C++ wrapper's proxy-executor arguments, where a bare `assert` fails:
    `InductorError: AssertionError: ` with no message at all, raised while compiling.
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        pairs = torch.view_as_complex(h.reshape(*h.shape[:-1], -1, 2))
        phase = torch.full(pairs.shape[-1:], 0.6 + 0.8j, device=h.device)
        return torch.view_as_real(pairs * phase).flatten(-2)


class ConstantRamp(nn.Module):
    """Scales by the running sum of a 0-dim tensor made in forward (`torch.tensor(0.5).cumsum(0)`).

    Export lifts that tensor as a constant, and Inductor cannot lower `cumsum` of a lifted 0-dim constant:
    `IndexError: tuple index out of range` while compiling (pytorch/pytorch#193265). The same op on a buffer or
    on a value computed at run time compiles, so a repro must keep the constant a lifted constant.
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * torch.tensor(0.5).cumsum(0)


class AnyGate(nn.Module):
    """Weighs each token by whether any of its features is positive, the mask held as uint8 as masks often are.

    Inductor's `any` of a uint8 tensor returns bool where eager returns uint8 (pytorch/pytorch#198081), so the
    weight computed from it in uint8 wraps around in eager (300 -> 44) and not in the compiled model: wrong
    results, with no error.
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        hit = (h > 0).to(torch.uint8).any(dim=-1, keepdim=True)
        return h * (hit * 200 + hit * 100).to(h.dtype) / 100


class ZeroSignGate(nn.Module):
    """Turns each feature's sign into an angle: atan(1 / ceil(h)), with `+ 0` to make a zero positive.

    For h in (-1, 0], ceil gives -0.0; eager's `-0.0 + 0.0` is +0.0, so the angle is +pi/2. Inductor drops the
    addition of zeros and keeps -0.0, so the angle is -pi/2: wrong results, with no error
    (pytorch/pytorch#189799).
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        up = torch.ceil(h)
        return h + torch.atan(torch.reciprocal(up + torch.zeros_like(up)))


class BucketResidual(nn.Module):
    """Snaps features, scaled by ten, to halves, then adds back each one's remainder within its 0.1-wide bucket
    (`//` by 0.1).

    Inductor lowers float floor division to floor(a / b), and eager computes it from fmod: 0.5 // 0.1 is 4.0 in
    eager (as in Python, fp64 included) and 5.0 in the compiled model, so every half lands one bucket too high:
    wrong results, with no error (pytorch/pytorch#197895). Halves are exact in every float dtype, so fp32 and
    fp64 agree on them, as an accuracy check against fp64 needs.
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        halves = torch.round(h * 20) / 2
        return h + (halves - torch.floor_divide(halves, 0.1) * 0.1) / 10


class Float8Select(nn.Module):
    """Keeps positive features at float8 precision and doubles the others, selected in float8 (as fp8 inference
    code selects between quantized values).

    Eager selects between the two float8 tensors; Inductor's `where` promotes the bool mask with them and raises
    `RuntimeError: Promotion for Float8 Types is not supported, attempted to promote Bool and Float8_e4m3fn`
    while compiling (torch 2.13 and 2.15; the tracker's float8 type bugs of Inductor, e.g. pytorch/pytorch#178095).
    """

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        kept, doubled = h.to(torch.float8_e4m3fn), (h * 2).to(torch.float8_e4m3fn)
        return torch.where(h > 0, kept, doubled).to(h.dtype)


class RowScaleNorm(nn.Module):
    """RMSNorm through a custom op whose fake kernel lies about its output shape (custom_ops.row_scale)."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        from .custom_ops import row_scale

        return h * row_scale(h)


class TokenPool(nn.Module):
    """Adds a summary of the sequence, pooled by a custom op whose fake kernel is wrong only for symbolic
    sizes (custom_ops.pool_tokens): a failure that exists only when exported with dynamic dims."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        from .custom_ops import pool_tokens

        return h + pool_tokens(h).mean(1, keepdim=True)


class CondGate(nn.Module):
    """Data-dependent control flow: torch.cond picks a ReLU branch or a damping branch."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.cond(h.mean() > 0, lambda x: torch.relu(x) * 2.0, lambda x: x * 0.5, (h,))


class CacheWrite(nn.Module):
    """Writes the first sequence's features into a buffer and reads the buffer back through a ReLU, as a KV cache
    is written and read: the exported program mutates that buffer, a state a candidate must keep."""

    def __init__(self, tokens: int = 64, features: int = 4096) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(tokens, features))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        rows, width = h.shape[-2], h.shape[-1]
        self.cache[:rows, :width].copy_(h[0])
        return h + torch.relu(self.cache[:rows, :width])


class TritonOutOfBounds(nn.Module):
    """The user's Triton kernel that reads out of bounds (GPU only; triton_ops.shifted_copy)."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        from .triton_ops import shifted_copy

        return shifted_copy(h.contiguous())


FRAGMENTS: dict[str, type[nn.Module]] = {
    "masked_mix": MaskedMix,
    "spectral_detrend": SpectralDetrend,
    "complex_recenter": ComplexRecenter,
    "complex_phase": ComplexPhase,
    "constant_ramp": ConstantRamp,
    "any_gate": AnyGate,
    "zero_sign_gate": ZeroSignGate,
    "bucket_residual": BucketResidual,
    "float8_select": Float8Select,
    "row_scale_norm": RowScaleNorm,
    "token_pool": TokenPool,
    "cond_gate": CondGate,
    "cache_write": CacheWrite,
    "triton_out_of_bounds": TritonOutOfBounds,
}


def splice(model: nn.Module, fragment: nn.Module) -> str:
    """Runs `fragment` right after the model's middle activation module; returns that module's name."""
    activations = [(name, m) for name, m in model.named_modules() if _is_activation(m)]
    if not activations:
        raise ValueError(f"{type(model).__name__} has no activation module to splice a fragment into")
    name, activation = activations[len(activations) // 2]
    parent, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent), attr, nn.Sequential(activation, fragment))
    return name


def _is_activation(module: nn.Module) -> bool:
    if isinstance(module, (nn.ReLU, nn.GELU, nn.SiLU, nn.Mish, nn.Tanh)):
        return True
    return type(module).__module__.startswith("transformers.activations")


def batch_and_tokens() -> tuple:
    """Dynamic batch and sequence dims of the first input, for a workload exported with torch.export.Dim
    (positional: the models name their first argument differently)."""
    from .custom_ops import MAX_TOKENS

    return ({0: Dim("batch", min=1, max=8), 1: Dim("tokens", min=2, max=MAX_TOKENS)},)
