"""RelServe's priority estimates: PEM (Eq. 10, Algorithm 1), running priority, Δ (Eq. 15-17).

Pure functions of the latency predictors (Eq. 9, :mod:`.predictors`); the scheduler
(:mod:`.scheduler`) calls them every step.
"""

from __future__ import annotations

from collections.abc import Iterable

from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.relserve.predictors import LatencyPredictors

__all__ = ["delta_latency", "pem_priority", "running_priority"]


def pem_priority(
    prompt_lens: Iterable[int],
    max_tokens: Iterable[int],
    miss_ratio: float,
    pred: LatencyPredictors,
    mnbt: int,
    *,
    decomposition: str = "code",
    cap: int | None = None,
    mns: int | None = None,
) -> float:
    """PEM(R) (Eq. 10) of the waiting requests of one relQuery, with utok* = tok × ratio (Eq. 11).

    ``decomposition="code"`` (``_calc_single_query_priority``): walk the requests in queue order,
    close a prefill batch when its utok* would exceed ``mnbt``; each closed batch costs
    L^prefill(Σ utok*) + L^decode(|batch|) × max OL in the batch (OL = ``max_tokens`` - 1).

    ``decomposition="alg1"`` (Algorithm 1): prefill batches are cut at ``mnbt``; when the
    accumulated utok* would exceed ``cap`` or the decode batch ``mns``, the GPU decodes to
    completion: OL(R) decode batches of the accumulated size.

    Args:
        prompt_lens: tok(r) of the waiting requests, in queue order.
        max_tokens: ``max_tokens`` of the same requests.
        miss_ratio: The relQuery's cache-miss ratio (Eq. 11).
        pred: The fitted predictors (Eq. 9).
        mnbt: ``max_num_batched_tokens``.
        decomposition: ``code`` or ``alg1``.
        cap: KV capacity in tokens (``alg1`` only).
        mns: ``max_num_seqs`` (``alg1`` only).

    Returns:
        The estimated execution duration in seconds (the priority value; lower first).
    """
    toks = [p * miss_ratio for p in prompt_lens]
    ols = [m - 1 for m in max_tokens]
    total = 0.0
    if decomposition == "code":
        acc, n, ol = 0.0, 0, 0
        for u, o in zip(toks, ols, strict=True):
            if n and acc + u > mnbt:
                total += pred.prefill(acc) + pred.decode(n) * ol
                acc, n, ol = 0.0, 0, 0
            acc += u
            n += 1
            ol = max(ol, o)
        if n:
            total += pred.prefill(acc) + pred.decode(n) * ol
        return total
    if decomposition != "alg1":
        raise ConfigError(f"decomposition must be 'code' or 'alg1', got {decomposition!r}")
    cap = cap if cap is not None else 1 << 62
    mns = mns if mns is not None else 1 << 62
    ol_r = max(ols, default=0)
    p_tok, d_n, accum = 0.0, 0, 0.0
    for u in toks:
        if d_n and (u + accum > cap or d_n + 1 > mns):  # lines 4-8: decode to completion
            if p_tok:
                total += pred.prefill(p_tok)
            total += pred.decode(d_n) * ol_r
            p_tok, d_n, accum = 0.0, 0, 0.0
        if p_tok and u + p_tok > mnbt:  # lines 9-10: the prefill batch is full
            total += pred.prefill(p_tok)
            p_tok = 0.0
        p_tok += u
        d_n += 1
        accum += u
    if d_n:  # lines 12-15: leftovers
        if p_tok:
            total += pred.prefill(p_tok)
        total += pred.decode(d_n) * ol_r
    return total


def running_priority(
    remaining_steps: Iterable[int], num_running: int, pred: LatencyPredictors
) -> float:
    """Priority of a running-only relQuery (``_update_running_priority_abs``).

    max over its running requests of (``max_tokens`` - generated) × L^decode(``num_running``),
    where ``num_running`` is its own number of running requests in the code.
    """
    return max(remaining_steps, default=0) * pred.decode(num_running)


def delta_latency(
    pred: LatencyPredictors,
    prefill_uncached: float,
    prefill_size: int,
    prefill_ol: int,
    running_only: list[tuple[int, int]],
    max_running_remaining: int,
    num_waiting_relqueries: int,
    *,
    form: str = "code",
) -> tuple[float, float, float]:
    """Δ = Δ+ - Δ- of prefilling the candidate batch p before decoding (Eq. 15-17).

    Code form (``predict_delta_latency``): Δ+ = Σ_{R running-only} [L^prefill(p) + α^d·|p|·
    min(OL(p), rem(R))] and Δ- = |R-|·β^d·min(OL(p), max_R rem(R)), where rem(R) is R's largest
    remaining step count and |R-| counts every waiting relQuery (the candidate's included).

    Paper form: Δ+ = L^prefill(p)·|R+| + Σ_R α^d·|p|·min(OL(R), OL(p)) and
    Δ- = |R-|·β^d·min(OL(p), max_R OL(R)).

    Args:
        pred: Eq. 9 predictors.
        prefill_uncached: utok(p) of the candidate prefill batch.
        prefill_size: req(p).
        prefill_ol: OL(p) = max ``max_tokens`` - 1 over p.
        running_only: (rem(R), OL(R)) of each running-only relQuery R.
        max_running_remaining: max rem(R) over the running relQueries (code form); the paper
            form uses max OL(R) over ``running_only`` instead.
        num_waiting_relqueries: |R-|.
        form: ``code`` or ``paper``.

    Returns:
        (Δ, Δ+, Δ-); the arranger prefills iff Δ < 0.
    """
    lp = pred.prefill(prefill_uncached)
    if form == "code":
        plus = sum(
            lp + pred.alpha_d * prefill_size * min(prefill_ol, rem) for rem, _ in running_only
        )
        minus = num_waiting_relqueries * pred.beta_d * min(prefill_ol, max_running_remaining)
    elif form == "paper":
        plus = lp * len(running_only) + sum(
            pred.alpha_d * prefill_size * min(ol, prefill_ol) for _, ol in running_only
        )
        max_ol = max((ol for _, ol in running_only), default=0)
        minus = num_waiting_relqueries * pred.beta_d * min(prefill_ol, max_ol)
    else:
        raise ConfigError(f"delta form must be 'code' or 'paper', got {form!r}")
    return plus - minus, plus, minus
