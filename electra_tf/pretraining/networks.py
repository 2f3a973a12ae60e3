"""The networks a pre-training objective trains, built in one place from the config.

`build_networks(config, dtype_policy)` makes, for each setting of the config, the networks of
the original's `run_pretraining.PretrainingModel` (ELECTRA and Electric) and of the paper's
objective ablations; `ElectraPretrainer` receives them (as Model Garden's pretrainer receives
its encoders) and only runs them. The roles:

- default: a small generator (`config.generator_config()`, scope `generator`) that shares the
  discriminator's whole embedding block, with its own `embeddings_project`;
- `untied_generator_embeddings`: the generator has its own embeddings (`generator/...`);
- `untied_generator=False`: generator and discriminator are the same network;
- `uniform_generator`: no generator network (the pretrainer's logits are zeros);
- `electra_objective=False`: the BERT baseline, a full-size masked LM and no discriminator head;
- `two_tower_generator` (forced by `electric_objective`): the generator is a two-tower cloze
  model (`generator_ltr`, `generator_rtl`) with its head `cloze_predictions`;
- `objective_variant` "replace_mlm" / "all_tokens_mlm": masked-LM heads on the corrupted input
  (`ablations.build_corrupted_mlm_head`) instead of the replaced-token head.
"""

from __future__ import annotations

import dataclasses

import tf_keras as keras

from electra_tf.config import MASKED_LM_VARIANTS, ResolvedPretrainingConfig, check_resolved
from electra_tf.modeling import (
    DiscriminatorHead,
    GeneratorHead,
    TransformerEncoder,
    TwoTowerClozeTransformer,
)
from electra_tf.pretraining import ablations


@dataclasses.dataclass(frozen=True)
class PretrainingNetworks:
    """The layers of one pre-training setup; every variable exists once built.

    Attributes:
        discriminator: the full-size `TransformerEncoder` (scope `electra`); also the
            BERT baseline's masked LM.
        generator: a separate small `TransformerEncoder`, the `discriminator` itself (the same
            object: shared weights), a `TwoTowerClozeTransformer`, or None (uniform generator).
        generator_head: the masked-LM head on the generator (`generator_predictions`), tied to
            its word embeddings; None for the uniform and two-tower generators.
        discriminator_head: the replaced-token head (`discriminator_predictions`); None
            without a discriminator objective or under a masked-LM ablation.
        cloze_head: the two-tower generator's head (`cloze_predictions`), or None.
        corrupted_mlm_head: "replace_mlm" / "all_tokens_mlm"'s heads, or None.
    """

    discriminator: TransformerEncoder
    generator: TransformerEncoder | TwoTowerClozeTransformer | None
    generator_head: GeneratorHead | None
    discriminator_head: DiscriminatorHead | None
    cloze_head: GeneratorHead | None
    corrupted_mlm_head: keras.layers.Layer | None

    @property
    def two_tower(self) -> bool:
        """The generator is the two-tower cloze model (Electric's): it runs on the unmasked
        input and is trained by the cloze loss."""
        return isinstance(self.generator, TwoTowerClozeTransformer)

    @property
    def separate_generator(self) -> bool:
        """The generator is a network of its own (scope `generator`), not the discriminator."""
        return (
            self.generator is not None
            and self.generator is not self.discriminator
            and not self.two_tower
        )

    def check_matches(self, config: ResolvedPretrainingConfig) -> None:
        """Raises ValueError where the networks cannot serve `config`'s (resolved) objective:
        the pretrainer's forward pass picks its path from the config."""
        expected = {
            "a two-tower generator": config.two_tower_generator,
            "no generator network (uniform)": config.uniform_generator,
            "a head on the discriminator": config.has_discriminator,
            "corrupted masked-LM heads": config.objective_variant in MASKED_LM_VARIANTS,
        }
        has = {
            "a two-tower generator": self.two_tower,
            "no generator network (uniform)": self.generator is None,
            "a head on the discriminator": (
                self.discriminator_head is not None or self.corrupted_mlm_head is not None
            ),
            "corrupted masked-LM heads": self.corrupted_mlm_head is not None,
        }
        for role, wanted in expected.items():
            if has[role] != wanted:
                raise ValueError(
                    f"the networks {'have' if has[role] else 'lack'} {role}, which the config "
                    f"{'does not ask for' if has[role] else 'asks for'}: build them with "
                    "build_networks(config, ...)"
                )


def build_networks(
    config: ResolvedPretrainingConfig,
    dtype_policy: str | keras.mixed_precision.Policy | None = None,
) -> PretrainingNetworks:
    """The networks `config` asks for, as the original builds them.

    Creation order is part of the result: it fixes the order of `trainable_variables` and of
    the checkpoint's objects, so it stays the original pretrainer's.

    Args:
        config: the resolved pre-training config (`pretraining_config(...)`): the roles read
            fields resolution fills in, such as `two_tower_generator` under
            `electric_objective`.
        dtype_policy: every layer's dtype policy; None: `config.precision`.

    Returns:
        `PretrainingNetworks`, every variable created.
    """
    config = check_resolved(config, "build_networks")
    policy = config.precision if dtype_policy is None else dtype_policy
    disc_config = config.discriminator_config()
    discriminator = TransformerEncoder(disc_config, name="discriminator", dtype=policy)
    generator, cloze_head = _build_generator(config, discriminator, policy)
    generator_head = None
    if generator is not None and cloze_head is None:
        generator_head = GeneratorHead(generator.config, generator.embeddings, dtype=policy)
    # Replace MLM / All-Tokens MLM: masked-LM heads where the replaced-token head would be.
    corrupted_mlm_head = ablations.build_corrupted_mlm_head(
        config, disc_config, discriminator.embeddings, policy
    )
    discriminator_head = None
    if config.has_discriminator and corrupted_mlm_head is None:
        discriminator_head = DiscriminatorHead(disc_config, dtype=policy)
    return PretrainingNetworks(
        discriminator=discriminator,
        generator=generator,
        generator_head=generator_head,
        discriminator_head=discriminator_head,
        cloze_head=cloze_head,
        corrupted_mlm_head=corrupted_mlm_head,
    )


def _build_generator(
    config: ResolvedPretrainingConfig, discriminator: TransformerEncoder, policy
) -> tuple[TransformerEncoder | TwoTowerClozeTransformer | None, GeneratorHead | None]:
    """(generator, cloze head): the generator network `config` asks for, and with the
    two-tower generator its head (None otherwise)."""
    # Validated by resolution: the two-tower generator comes with an untied,
    # non-uniform generator and a discriminator.
    separate = (
        config.has_discriminator
        and config.untied_generator
        and not config.uniform_generator
        and not config.two_tower_generator
    )
    shared = None if config.untied_generator_embeddings else discriminator.embeddings
    if config.uniform_generator:
        return None, None
    if config.two_tower_generator:
        generator = TwoTowerClozeTransformer(
            config.generator_config(), shared, name="two_tower_cloze", dtype=policy
        )
        # The original's `get_token_logits` under `cloze_predictions`, tied to the ltr table.
        cloze_head = GeneratorHead(
            generator.config,
            generator.embeddings,
            input_width=generator.output_width,
            name="cloze_predictions",
            dtype=policy,
        )
        return generator, cloze_head
    if separate:
        generator = TransformerEncoder(
            config.generator_config(), embeddings=shared, name="generator", dtype=policy
        )
        return generator, None
    # The original builds this "generator" in the discriminator's scope: same weights.
    return discriminator, None
