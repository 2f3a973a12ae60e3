"""`make bench-serve`'s Session rows: `encode_ids` run by a TF1 Session, as TF Serving runs the
export, on the function rows' ids; and the report's ratios for them."""

from __future__ import annotations

import argparse

from bench import bench_serve, serving_graph
from electra_tf.config import pretraining_config
from electra_tf.modeling.discriminator import ElectraDiscriminator, dummy_inputs
from electra_tf.serving.kinds import save_for_serving

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(27))]


def test_a_session_times_the_export_on_the_given_ids(tmp_path):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n")
    overrides = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                 "intermediate_size": 32, "max_position_embeddings": 16}  # fmt: skip
    hparams = {"vocab_size": len(VOCAB), "embedding_size": 16, "model_hparam_overrides": overrides}
    model = ElectraDiscriminator(pretraining_config("tiny", hparams=hparams).discriminator_config())
    model(dummy_inputs())
    path = save_for_serving(model, str(tmp_path), str(vocab_file), 16, name="m")
    ids = {b: serving_graph.random_ids(b, 16, len(VOCAB)) for b in (1, 3)}
    args = argparse.Namespace(warmup=1, calls=2, threads=(1, 2))
    timings = bench_serve.session_timings(path, ids, args)
    assert {b: len(t) for b, t in timings.items()} == {1: 2, 3: 2}
    assert all(t > 0 for seconds in timings.values() for t in seconds)


def test_the_report_sets_each_session_row_beside_its_function_row(capsys):
    def row(ms):  # 3 calls of `ms` milliseconds at each batch
        return {1: [ms / 1000] * 3, 32: [10 * ms / 1000] * 3}

    session = bench_serve.SESSION
    results = {
        "electra-tf": {"serving_default": row(20.0), "encode_ids": row(20.0)},
        "electra-tf" + session: {"encode_ids": row(25.0)},
        "electra-tf, bfloat16": {"serving_default": row(10.0), "encode_ids": row(10.0)},
        "electra-tf, bfloat16" + session: {"encode_ids": row(12.5)},
    }
    args = argparse.Namespace(seq=128, calls=3, warmup=0, threads=(1, 2), batches=[1, 32])
    run_info = {"peak": None, "load_start": 0.5, "load_end": 0.5}
    bench_serve.print_report(results, [], args, run_info)
    out = capsys.readouterr().out
    assert "| electra-tf in a Session | `encode_ids` | 1 | 25.0 |" in out
    assert "- electra-tf in a Session / the function runtime, batch 1: 1.25" in out
    # The bfloat16 Session row against the float32 export in a Session: 25 / 12.5.
    assert (
        "- electra-tf, bfloat16 in a Session `encode_ids` vs the float32 export, batch 32: "
        "2.00x" in out
    )
    assert "- electra-tf, bfloat16 `encode_ids` vs the float32 export, batch 1: 2.00x" in out
    assert "in a Session `serving_default`" not in out
