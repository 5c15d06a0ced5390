"""Command-line options of ``llmload sim``: one frozen value, validated once.

Every knob of the simulated engine is a flag with a documented default; the
defaults describe a small model on one GPU (about 50 decode steps per second
with a full batch of 256, 50k prompt tokens per second of prefill).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from llmload.errors import ConfigError
from llmload.sim.faults import FaultConfig, add_fault_arguments, fault_config_from
from llmload.sim.shapes import ShapeConfig, add_shape_arguments, shape_config_from  # reply shapes

__all__ = ["SimConfig", "build_parser", "parse_config"]


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Settings of one simulator process.

    Attributes:
        host: address to listen on (loopback by default).
        port: TCP port; 0 lets the kernel choose (the chosen port is printed).
        model: the one served model name; requests naming another get 404.
        max_model_len: context length in tokens; prompt + max_tokens must fit.
        max_num_seqs: most sequences decoded in one engine step (vLLM's
            ``--max-num-seqs``); the rest wait in a FIFO queue.
        max_num_batched_tokens: most prompt tokens admitted (prefilled) in one
            step; a longer prompt is admitted alone in its own step.
        prefill_base_ms: fixed prefill cost per admitted sequence.
        queue_delay_ms: fixed delay before a request joins the waiting queue
            (tokenization, scheduling, network); it does not occupy the
            batch, so it adds the same latency to every TTFT whatever the load.
        prefill_ms_per_token: prefill cost per prompt token.
        decode_step_ms: fixed cost of one decode step.
        decode_ms_per_seq: extra cost of one decode step per running sequence.
        max_catch_up_steps: when the process falls behind its step schedule
            (its own CPU saturated), one step may do the work of up to this many
            steps, making up N − 1 missed ones (each running sequence then gets
            that many tokens at once, written together). 1 (default): none; the
            engine slows down instead, as an overloaded real one does. Larger values keep the token rate of the
            schedule for benchmarks of a client that must not wait for the
            simulator.
        prefix_cache_blocks: prefix cache capacity in blocks (``llmload.sim.prefix_cache``); 0 = no cache.
        block_size: tokens per prefix-cache block (vLLM's ``--block-size``).
        output_len_mean: mean reply length in tokens when the model may stop
            (geometric distribution: a constant end-of-sequence chance per token).
        seed: seeds reply lengths and words, together with a request counter.
        backlog: listen backlog (the kernel caps it at net.core.somaxconn).
        shutdown_grace_s: on SIGTERM/SIGINT, how long in-flight replies may
            continue before their connections are closed.
        faults: fault injection (``llmload.sim.faults``); all off by default.
        shapes: reply shapes real servers send (``llmload.sim.shapes``); all off by default.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "llmload-sim"
    max_model_len: int = 4096
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    prefill_base_ms: float = 1.0
    queue_delay_ms: float = 0.0
    prefill_ms_per_token: float = 0.02
    decode_step_ms: float = 10.0
    decode_ms_per_seq: float = 0.04
    max_catch_up_steps: int = 1
    prefix_cache_blocks: int = 0
    block_size: int = 16
    output_len_mean: float = 128.0
    seed: int = 0
    backlog: int = 2048
    shutdown_grace_s: float = 0.5
    faults: FaultConfig = field(default_factory=FaultConfig)
    shapes: ShapeConfig = field(default_factory=ShapeConfig)  # reply shapes

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be within 0..65535, got {self.port}; use 0 for any free port")
        if not self.model or self.model.strip() != self.model:
            raise ConfigError(f"--model must be a non-empty name without surrounding spaces, got {self.model!r}")
        if self.prefix_cache_blocks < 0:
            raise ConfigError(f"--prefix-cache-blocks must be >= 0 (0 = no cache), got {self.prefix_cache_blocks}")
        for name in (
            "max_model_len",
            "max_num_seqs",
            "max_num_batched_tokens",
            "backlog",
            "max_catch_up_steps",
            "block_size",
        ):
            value = getattr(self, name)
            if value < 1:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be a positive integer, got {value}")
        for name in (
            "prefill_base_ms",
            "queue_delay_ms",
            "prefill_ms_per_token",
            "decode_step_ms",
            "decode_ms_per_seq",
            "shutdown_grace_s",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be a finite number >= 0, got {value}")
        if not (math.isfinite(self.output_len_mean) and self.output_len_mean >= 1):
            raise ConfigError(
                f"--output-len-mean must be a number >= 1 (tokens), got {self.output_len_mean}; "
                "use --output-len-mean 1 for one-token replies"
            )


def build_parser(prog: str = "llmload sim") -> argparse.ArgumentParser:
    """Return the argument parser of ``llmload sim``; defaults come from ``SimConfig``."""
    d = SimConfig()
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Simulated OpenAI-compatible LLM server with a continuous-batching timing model. "
            "Serves /v1/models, /v1/completions, /v1/chat/completions, /health and /metrics."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--host", default=d.host, help="address to listen on")
    p.add_argument("--port", type=int, default=d.port, help="TCP port; 0 picks a free one")
    p.add_argument("--model", default=d.model, help="served model name")
    p.add_argument("--max-model-len", type=int, default=d.max_model_len, help="context length, tokens")
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs, help="max sequences per step")
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=d.max_num_batched_tokens,
        help="max prompt tokens admitted per step (a longer prompt is admitted alone)",
    )
    p.add_argument("--prefill-base-ms", type=float, default=d.prefill_base_ms, help="prefill ms per sequence")
    p.add_argument(
        "--queue-delay-ms",
        type=float,
        default=d.queue_delay_ms,
        help="fixed ms before a request joins the queue; adds to every TTFT without using the batch",
    )
    p.add_argument(
        "--prefill-ms-per-token",
        type=float,
        default=d.prefill_ms_per_token,
        help="prefill ms per prompt token",
    )
    p.add_argument("--decode-step-ms", type=float, default=d.decode_step_ms, help="fixed ms per decode step")
    p.add_argument(
        "--decode-ms-per-seq",
        type=float,
        default=d.decode_ms_per_seq,
        help="ms per running sequence per step",
    )
    p.add_argument(
        "--max-catch-up-steps",
        type=int,
        default=d.max_catch_up_steps,
        help="when the simulator falls behind its step schedule, one step may do the work of up to N steps, "
        "making up N-1 missed ones (their tokens written together); 1 = slow down instead",
    )
    p.add_argument(
        "--prefix-cache-blocks",
        type=int,
        default=d.prefix_cache_blocks,
        help="prefix cache of N blocks (LRU): shared prompt prefixes skip prefill and are reported as "
        "usage.prompt_tokens_details.cached_tokens; 0 = no cache",
    )
    p.add_argument("--block-size", type=int, default=d.block_size, help="tokens per prefix-cache block")
    p.add_argument(
        "--output-len-mean",
        type=float,
        default=d.output_len_mean,
        help="mean reply length in tokens when ignore_eos is false (geometric)",
    )
    p.add_argument("--seed", type=int, default=d.seed, help="seed for reply lengths and words")
    p.add_argument("--backlog", type=int, default=d.backlog, help="listen backlog")
    p.add_argument(
        "--shutdown-grace-s",
        type=float,
        default=d.shutdown_grace_s,
        help="seconds in-flight replies may continue after SIGTERM/SIGINT",
    )
    add_fault_arguments(p)
    add_shape_arguments(p)  # reply shapes
    return p


def parse_config(argv: list[str] | None) -> SimConfig:
    """Parse ``argv`` (None: ``sys.argv[1:]``) into a validated ``SimConfig``.

    Raises:
        SystemExit: on unknown flags or unparsable numbers (argparse prints usage).
        ConfigError: on values out of range, naming the flag and the fix.
    """
    values = vars(build_parser().parse_args(argv))
    faults = fault_config_from(values)
    shapes = shape_config_from(values)  # reply shapes
    return SimConfig(**values, faults=faults, shapes=shapes)
