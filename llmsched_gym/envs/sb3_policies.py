"""Permutation-invariant actor-critic policies for stable-baselines3 (needs the ``rl`` extra).

The decisions of these environments rank rows: requests (Priority, Select, Preempt) or instances
(Route). A row's score should not depend on where the row sits in the table, and the value of a
state should not depend on the table's order. ``RowSetExtractor`` embeds every row with the same
weights (a DeepSets encoder, Zaheer et al., NeurIPS 2017, arXiv 1703.06114): with ``x_k`` the
row, ``c`` the context (every other observation key but the mask, e.g. the global features),

    h_k = phi([x_k, c])                  (shared MLP, one embedding per row)
    p   = rho([mean_{k: mask_k} h_k, c]) (masked mean: invariant to row order)

and ``RowHeads`` turns them into the actor's per-row scores and the critic's latent:

    score_k = psi([h_k, p])              (shared: equivariant, row k's score moves with row k)
    stop    = sigma(p)                   (Select's extra "close the batch" action)
    value   = V(p)                       (invariant)

The scores are the action distribution's parameters as they are (SB3's ``action_net`` is the
identity): the logits of the categorical for Select, Preempt and Route (MaskablePPO masks them),
and the means of a Gaussian for Priority's Box action. That Gaussian counts only the visible
rows (``mask``) in its log-probability and entropy: a padding row's score changes nothing, so
its noise would only add variance to the gradient. It explores in one of two ways:

* ``exploration="gaussian"``: independent noise on every row at every decision, with one log
  std shared by all rows (SB3's ``DiagGaussianDistribution``, masked).
* ``exploration="sde"``: state-dependent exploration (gSDE; Raffin et al., CoRL 2021,
  arXiv 2005.05719) on the score head. The noise of row ``k`` is ``z_k . eps``, with ``z_k``
  the score head's last hidden layer for that row and ``eps ~ N(0, diag(sigma^2))`` drawn
  once per rollout (or every ``sde_sample_freq`` steps) and shared by every row and decision:
  a perturbation of the scoring function itself, as a direct policy search perturbs its
  weights, rather than fresh noise on every ranking. PPO's ``use_sde=True`` turns it on. The
  log-probability is SB3's gSDE form: each row Gaussian with variance
  ``sum_j z_kj^2 sigma_j^2``.

>>> from stable_baselines3 import PPO  # doctest: +SKIP
>>> model = PPO(RowScorePolicy, env)  # doctest: +SKIP
>>> from sb3_contrib import MaskablePPO  # doctest: +SKIP
>>> model = MaskablePPO(MaskableRowScorePolicy, env)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import CategoricalDistribution, Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

__all__ = [
    "LinearSchedule",
    "MaskableRowScorePolicy",
    "MaskedRowGaussian",
    "RowHeads",
    "RowScorePolicy",
    "RowSDEGaussian",
    "RowSetExtractor",
    "row_ranks",
]


def _table_key(space: spaces.Dict) -> str:
    for key in ("requests", "instances"):
        if key in space.spaces:
            return key
    raise ValueError(f"observation space has no row table ('requests' or 'instances'): {space}")


def _mlp(sizes: list[int], last_act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if last_act or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` as ``x @ W.T + b``: the same numbers as ``nn.Linear`` (tests check it).

    ``nn.Linear`` runs one fused ``addmm``, which MKL takes about three times as long over as a
    matmul and an add on the small inputs of a rollout step (16 rows of 64; issue 40).
    """
    return torch.matmul(x, layer.weight.t()) + layer.bias


def _run(mlp: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``mlp(x)`` for ``_mlp``'s Linear / ReLU stacks, through ``_linear`` (same numbers)."""
    for layer in mlp:
        x = _linear(layer, x) if isinstance(layer, nn.Linear) else torch.relu(x)
    return x


class RowSetExtractor(BaseFeaturesExtractor):
    """Per-row embeddings (shared weights), their masked-mean pool and the mask, flat for SB3.

    Output: ``[h_1, ..., h_K, p, mask]`` of ``(K + 1) * embed_dim + K`` features; ``RowHeads``
    splits it.

    Args:
        observation_space: A Dict with a row table (``requests`` or ``instances``, shape
            ``(K, F)``), a ``mask`` over the rows (``K``), and context vectors (any other keys).
        embed_dim: Size of a row embedding and of the pool.
        hidden: Hidden width of phi and rho.
        relative: Also give phi each row's rank within the visible rows, per column
            (``row_ranks``): what a deployed scheduler compares (the shortest prompt in the
            queue, the least loaded instance). The squashed columns can differ by 1e-4 between
            the rows a decision hinges on (two instances' backlogs), which an MLP at its
            initial scale cannot resolve; their ranks differ by ``1 / (n - 1)``.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        embed_dim: int = 32,
        hidden: int = 64,
        relative: bool = False,
    ):
        self.table_key = _table_key(observation_space)
        k, f = observation_space.spaces[self.table_key].shape
        self.context_keys = sorted(
            key for key in observation_space.spaces if key not in (self.table_key, "mask")
        )
        c = sum(int(observation_space.spaces[key].shape[0]) for key in self.context_keys)
        super().__init__(observation_space, features_dim=(k + 1) * embed_dim + k)
        self.num_rows, self.embed_dim = k, embed_dim
        self.relative = bool(relative)
        self.phi = _mlp([f * (2 if self.relative else 1) + c, hidden, embed_dim])
        self.rho = _mlp([embed_dim + c, hidden, embed_dim])

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(batch, (K + 1) * embed_dim + K)`` features."""
        rows = observations[self.table_key].float()
        b, k, _ = rows.shape
        if self.context_keys:
            ctx = torch.cat(
                [observations[key].float().reshape(b, -1) for key in self.context_keys], 1
            )
        else:
            ctx = rows.new_zeros((b, 0))
        mask = observations["mask"].float().reshape(b, k, 1)
        if self.relative:
            rows = torch.cat([rows, row_ranks(rows, mask.reshape(b, k))], dim=2)
        h = _run(self.phi, torch.cat([rows, ctx.unsqueeze(1).expand(b, k, ctx.shape[1])], dim=2))
        pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        p = _run(self.rho, torch.cat([pooled, ctx], dim=1))
        return torch.cat([h.reshape(b, k * self.embed_dim), p, mask.reshape(b, k)], dim=1)


def row_ranks(rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per row and column: the row's rank among the visible rows, in [0, 1] (0: smallest).

    ``rank = (#visible rows below + #other visible rows equal / 2) / (n - 1)`` with ``n`` the
    visible rows (0 when ``n`` < 2); invisible rows get their rank among the visible ones too
    (the extractor masks them out of the pool and the environment ignores their scores).
    Equivariant: permuting the rows permutes the ranks.

    Args:
        rows: ``(batch, K, F)``.
        mask: ``(batch, K)``, 1 for a visible row.
    """
    other = rows.unsqueeze(1)  # (b, 1, K_j, F)
    this = rows.unsqueeze(2)  # (b, K_i, 1, F)
    visible = mask.reshape(mask.shape[0], 1, -1, 1)  # over j
    below = ((other < this).float() * visible).sum(2)
    equal = ((other == this).float() * visible).sum(2) - mask.unsqueeze(2)  # not itself
    n = mask.sum(1).reshape(-1, 1, 1)
    return (below + 0.5 * equal.clamp(min=0.0)) / (n - 1.0).clamp(min=1.0)


class RowHeads(nn.Module):
    """SB3's ``mlp_extractor``: per-row scores for the actor, the pool's latent for the critic.

    Args:
        num_rows: K, rows of the table.
        embed_dim: The extractor's ``embed_dim``.
        num_actions: K (one score per row), or K + 1 (plus a stop logit from the pool).
        hidden: Hidden width of the heads.
        with_rows: Return the row mask and the score head's last hidden layer after the scores
            (``[scores (K), mask (K), z (K * hidden)]``), for the row Gaussians of Priority.
    """

    def __init__(
        self,
        num_rows: int,
        embed_dim: int,
        num_actions: int,
        hidden: int = 64,
        with_rows: bool = False,
    ) -> None:
        super().__init__()
        if num_actions not in (num_rows, num_rows + 1):
            raise ValueError(f"{num_actions} actions for {num_rows} rows: need K or K + 1")
        self.num_rows, self.embed_dim, self.hidden = num_rows, embed_dim, hidden
        self.with_rows = with_rows
        self.latent_dim_pi = num_actions + (num_rows * (1 + hidden) if with_rows else 0)
        self.latent_dim_vf = hidden
        self.score_hidden = _mlp([2 * embed_dim, hidden])
        self.score_out = nn.Linear(hidden, 1)
        self.stop = _mlp([embed_dim, hidden, 1], last_act=False) if num_actions > num_rows else None
        self.critic = _mlp([embed_dim, hidden])

    def _split(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(h (batch, K, d), p (batch, d), mask (batch, K))`` from the extractor's output."""
        b = features.shape[0]
        k, d = self.num_rows, self.embed_dim
        return (
            features[:, : k * d].reshape(b, k, d),
            features[:, k * d : (k + 1) * d],
            features[:, (k + 1) * d :],
        )

    def row_scores(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, z)``: scores (batch, K), or (batch, K + 1) with the stop logit last.

        ``z`` (batch, K, hidden) is each row's last hidden layer (gSDE's features).
        """
        h, p, _ = self._split(features)
        return self._scores(h, p)

    def _scores(self, h: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, k, d = h.shape
        z = _run(self.score_hidden, torch.cat([h, p.unsqueeze(1).expand(b, k, d)], dim=2))
        scores = _linear(self.score_out, z).squeeze(2)
        if self.stop is not None:
            scores = torch.cat([scores, _run(self.stop, p)], dim=1)
        return scores, z

    def _actor(self, h: torch.Tensor, p: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores, z = self._scores(h, p)
        if not self.with_rows:
            return scores
        return torch.cat([scores, mask, z.reshape(z.shape[0], -1)], dim=1)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        """The actor's latent: the scores, then (``with_rows``) the mask and ``z``."""
        return self._actor(*self._split(features))

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        """The critic's latent, from the pool only (so the value is order-invariant)."""
        return _run(self.critic, self._split(features)[1])

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor latent, critic latent)``, as SB3's ``MlpExtractor`` (one split for both)."""
        h, p, mask = self._split(features)
        return self._actor(h, p, mask), _run(self.critic, p)


class MaskedRowGaussian(Distribution):
    """Independent Gaussian scores per row; only visible rows count in log-prob and entropy.

    Args:
        num_rows: K, the action's size.
    """

    def __init__(self, num_rows: int) -> None:
        super().__init__()
        self.num_rows = num_rows
        self.mask: torch.Tensor | None = None

    def proba_distribution_net(self, *args: Any, **kwargs: Any) -> Any:
        """Not used: the row-scoring policy builds its own heads."""
        raise NotImplementedError("the row-scoring policy builds its own heads")

    def proba_distribution(  # type: ignore[override]
        self, mean: torch.Tensor, std: torch.Tensor, mask: torch.Tensor
    ) -> MaskedRowGaussian:
        """Row ``k`` ~ N(mean_k, std_k^2); ``mask`` (0/1, like ``mean``) marks visible rows."""
        self.distribution = torch.distributions.Normal(mean, std, validate_args=False)
        self.mask = mask
        return self

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Sum over the visible rows of each row's log-density."""
        return (self.distribution.log_prob(actions) * self.mask).sum(dim=1)

    def entropy(self) -> torch.Tensor:
        """Sum over the visible rows of each row's entropy."""
        return (self.distribution.entropy() * self.mask).sum(dim=1)

    def sample(self) -> torch.Tensor:
        """Independent noise on every row."""
        return self.distribution.rsample()

    def mode(self) -> torch.Tensor:
        """The mean scores (deterministic action)."""
        return self.distribution.mean

    def actions_from_params(self, *args: Any, deterministic: bool = False, **kw: Any) -> Any:
        """Set the parameters, then sample (or take the mode)."""
        self.proba_distribution(*args, **kw)
        return self.get_actions(deterministic=deterministic)

    def log_prob_from_params(self, *args: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions and their log-probability."""
        actions = self.actions_from_params(*args, **kw)
        return actions, self.log_prob(actions)


class RowSDEGaussian(MaskedRowGaussian):
    """gSDE on the score head: row ``k``'s noise is ``z_k . eps``, one ``eps`` for all rows.

    ``eps`` (one per environment) is drawn by ``sample_weights`` and held until the next draw,
    so a rollout follows one perturbed scoring function (module docstring).
    """

    def __init__(self, num_rows: int) -> None:
        super().__init__(num_rows)
        self.eps = torch.zeros((1, 1))
        self.z = torch.zeros((1, 1, 1))

    def sample_weights(self, log_std: torch.Tensor, batch_size: int = 1) -> None:
        """Draw ``eps ~ N(0, diag(exp(log_std)^2))`` for each of ``batch_size`` environments."""
        std = torch.exp(log_std.detach())
        self.eps = std * torch.randn((batch_size, std.shape[0]), device=std.device)

    def proba_distribution(  # type: ignore[override]
        self, mean: torch.Tensor, log_std: torch.Tensor, mask: torch.Tensor, z: torch.Tensor
    ) -> RowSDEGaussian:
        """Row ``k`` ~ N(mean_k, sum_j z_kj^2 exp(2 log_std_j)), as SB3's gSDE."""
        var = (z.detach() ** 2) @ torch.exp(2 * log_std) + 1e-6
        self.z = z.detach()
        return super().proba_distribution(mean, torch.sqrt(var), mask)

    def sample(self) -> torch.Tensor:
        """The mean plus the held perturbation ``z_k . eps`` of each row."""
        mean, z = self.distribution.mean, self.z
        eps = self.eps if len(self.eps) == len(z) else self.eps[:1].expand(len(z), -1)
        return mean + torch.einsum("bkh,bh->bk", z, eps)


class UncheckedCategorical(CategoricalDistribution):
    """SB3's categorical over the row logits, without torch's argument checks.

    torch checks a distribution's parameters (and each action's support) on every construction
    unless told not to; with one construction per decision and per minibatch that was about a
    third of a small policy's CPU time (issue 40). The logits come from the network, and the
    actions from the distribution or the rollout buffer, so the checks cannot fail; the numbers
    are unchanged.
    """

    def proba_distribution(self, action_logits: torch.Tensor) -> UncheckedCategorical:
        """The categorical with these logits (unchecked)."""
        self.distribution = torch.distributions.Categorical(
            logits=action_logits, validate_args=False
        )
        return self


def _unchecked_maskable(action_dim: int) -> Distribution:
    """sb3-contrib's masked categorical without torch's argument checks (``UncheckedCategorical``).

    Built here rather than as a module-level class so that only MaskablePPO users import
    sb3-contrib's distributions (an optional extra).
    """
    from sb3_contrib.common.maskable.distributions import (
        MaskableCategorical,
        MaskableCategoricalDistribution,
    )

    class UncheckedMaskableCategorical(MaskableCategoricalDistribution):
        """Also built once per decision rather than three times (``apply_masking``)."""

        _dist: Any = None
        _logits: torch.Tensor | None = None

        @property
        def distribution(self) -> Any:
            if self._dist is None and self._logits is not None:
                # validate_args=False carries over to apply_masking's re-initialisations.
                self._dist = MaskableCategorical(logits=self._logits, validate_args=False)
            return self._dist

        @distribution.setter
        def distribution(self, value: Any) -> None:
            self._dist, self._logits = value, None

        def proba_distribution(self, action_logits: torch.Tensor) -> Any:
            self._dist, self._logits = None, action_logits.view(-1, self.action_dim)
            return self

        def apply_masking(self, masks: Any) -> None:
            logits = self._logits
            if self._dist is not None or logits is None or masks is None:
                self.distribution.apply_masking(masks)
                return
            # MaskableCategorical(logits).apply_masking(masks) normalises three times; its
            # middle one (apply_masking(None) in __init__) does not reach the result, which is
            # normalise(where(masks, normalise(logits), -1e8)): built here with the same ops.
            d = MaskableCategorical.__new__(MaskableCategorical)
            torch.distributions.Categorical.__init__(d, logits=logits, validate_args=False)
            d._original_logits = d.logits
            d.masks = torch.as_tensor(masks, dtype=torch.bool, device=logits.device).reshape(
                d.logits.shape
            )
            huge_neg = torch.tensor(-1e8, dtype=d.logits.dtype, device=logits.device)
            masked = torch.where(d.masks, d._original_logits, huge_neg)
            torch.distributions.Categorical.__init__(d, logits=masked, validate_args=False)
            self._dist = d

    return UncheckedMaskableCategorical(action_dim)


class _RowScoring:
    """Mixin: ``RowHeads`` as the mlp_extractor, an identity action net, row distributions.

    Args (besides SB3's):
        exploration: Priority's Box only: ``"gaussian"`` (independent per row and decision) or
            ``"sde"`` (state-dependent, held for a rollout; PPO's ``use_sde=True`` selects it).
    """

    _masked: bool
    """Whether the algorithm masks the logits (sb3-contrib's MaskablePPO)."""

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        *args: Any,
        exploration: str | None = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("features_extractor_class", RowSetExtractor)
        use_sde = bool(kwargs.get("use_sde", False))
        if exploration is None:
            exploration = "sde" if use_sde else "gaussian"
        if exploration not in ("gaussian", "sde"):
            raise ValueError(f"exploration must be 'gaussian' or 'sde', got {exploration!r}")
        if (exploration == "sde") != use_sde:
            raise ValueError(
                f"exploration={exploration!r} needs use_sde={exploration == 'sde'} in the algorithm"
            )
        if use_sde and not isinstance(action_space, spaces.Box):
            raise ValueError("exploration='sde' is for a Box action (Priority's scores)")
        self.exploration = exploration
        super().__init__(observation_space, action_space, *args, **kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()  # type: ignore[misc]
        data["exploration"] = self.exploration
        return data

    def _num_actions(self) -> int:
        space = self.action_space
        if isinstance(space, spaces.Box):
            return int(space.shape[0])
        if isinstance(space, spaces.Discrete):
            return int(space.n)
        raise ValueError(f"row-scoring policies need a Box or Discrete action, got {space}")

    def _build_mlp_extractor(self) -> None:
        ext = self.features_extractor
        box = isinstance(self.action_space, spaces.Box)
        self.mlp_extractor = RowHeads(
            ext.num_rows, ext.embed_dim, self._num_actions(), with_rows=box
        )

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # The scores are the distribution's parameters: no mixing across rows after them.
        self.action_net = nn.Identity()
        if isinstance(self.action_space, spaces.Discrete):
            n = int(self.action_space.n)
            self.action_dist = _unchecked_maskable(n) if self._masked else UncheckedCategorical(n)
        if isinstance(self.action_space, spaces.Box):
            k = self.mlp_extractor.num_rows
            if self.exploration == "sde":
                self.action_dist = RowSDEGaussian(k)
                size = self.mlp_extractor.hidden
            else:
                self.action_dist = MaskedRowGaussian(k)
                size = 1
            self.log_std = nn.Parameter(torch.full((size,), float(self.log_std_init)))
            if isinstance(self.action_dist, RowSDEGaussian):
                self.reset_noise()  # so a loaded model can act stochastically at once
        if self.ortho_init:  # small initial scores, as SB3 initialises its action net
            last = self.mlp_extractor.score_out
            nn.init.orthogonal_(last.weight, gain=0.01)
            nn.init.zeros_(last.bias)
        self.optimizer = self.optimizer_class(
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )

    def reset_noise(self, n_envs: int = 1) -> None:
        """Draw new exploration noise (gSDE), one per environment."""
        if not isinstance(self.action_dist, RowSDEGaussian):
            raise ValueError("reset_noise() is for exploration='sde'")
        self.action_dist.sample_weights(self.log_std, batch_size=n_envs)

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Distribution:
        if not isinstance(self.action_dist, MaskedRowGaussian):
            return super()._get_action_dist_from_latent(latent_pi)  # type: ignore[misc]
        k, b = self.mlp_extractor.num_rows, latent_pi.shape[0]
        mean, mask = latent_pi[:, :k], latent_pi[:, k : 2 * k]
        if isinstance(self.action_dist, RowSDEGaussian):
            z = latent_pi[:, 2 * k :].reshape(b, k, -1)
            return self.action_dist.proba_distribution(mean, self.log_std, mask, z)
        std = torch.exp(self.log_std).expand_as(mean)
        return self.action_dist.proba_distribution(mean, std, mask)


class RowScorePolicy(_RowScoring, ActorCriticPolicy):
    """PPO / A2C policy: shared per-row scores (Priority's Box, or a Discrete over rows)."""

    _masked = False


def _maskable_base() -> type:
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    return MaskableActorCriticPolicy


class MaskableRowScorePolicy(_RowScoring, _maskable_base()):
    """MaskablePPO policy: per-row logits (Select: plus a stop logit; Route: per instance)."""

    _masked = True


class LinearSchedule:
    """A learning rate falling linearly from ``value`` to 0 over training (RL Zoo's ``lin_<x>``).

    SB3 calls it with the progress remaining (1 at the start, 0 at the end). A class in the
    package rather than a lambda, so a saved model's pickled schedule loads wherever the package
    is installed.
    """

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def __call__(self, progress_remaining: float) -> float:
        """The learning rate with ``progress_remaining`` of training left (1 -> 0)."""
        return progress_remaining * self.value

    def __repr__(self) -> str:
        return f"LinearSchedule({self.value!r})"
