#!/usr/bin/env python3
"""Generates the TFLite recurrent-layer test cases and their reference outputs.

Keras recurrent layers converted with tf.lite.TFLiteConverter (float32), and
hand-built operators for what the converter does not emit from Keras, each run
by the TFLite interpreter (builtin kernels, no delegate) on a seeded input.
Writes, per case, in the layout of scripts/gen_tflite_models.py:

    tests/tflite_recurrent/<name>/model.tflite
    tests/tflite_recurrent/<name>/test_data_set_0/input_0.pb    (onnx TensorProto)
    tests/tflite_recurrent/<name>/test_data_set_0/output_0.pb   (the interpreter's output)

The converter fuses a Keras 2 (tf_keras) LSTM into UNIDIRECTIONAL_SEQUENCE_LSTM;
Keras 3's LSTM, and SimpleRNN and GRU of either, become WHILE loops, and
Bidirectional(LSTM) becomes two UNIDIRECTIONAL_SEQUENCE_LSTM with REVERSE_V2 and
CONCATENATION. So UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_LSTM and
the LSTM variants Keras has no switch for (CIFG, peepholes, projection, clips,
layer norm, time major) are written directly with the flatbuffer schema's
object API.

Cases:
  keras_lstm_sequence      LSTM(8, return_sequences=True)
  keras_lstm_stacked       LSTM(8, return_sequences=True) -> LSTM(6) (last step only)
  keras_bidirectional      Bidirectional(LSTM(6, return_sequences=True))
  keras_lstm_backwards     LSTM(6, go_backwards=True, return_sequences=True)
  lstm_peephole_projection peepholes, projection with bias, cell_clip, proj_clip
  lstm_cifg_layer_norm     CIFG (no input gate), peepholes, layer norm, time major
  rnn_relu                 UNIDIRECTIONAL_SEQUENCE_RNN, RELU, time major
  bidirectional_merged     BIDIRECTIONAL_SEQUENCE_LSTM, merge_outputs, time major

Usage: python scripts/gen_tflite_recurrent.py [--out tests/tflite_recurrent] [NAME ...]
Requirements: scripts/requirements-tflite.txt (tf-keras for the Keras 2 layers)
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from tensorflow.lite.python import schema_py_generated as fb  # noqa: E402
from tensorflow.lite.tools import flatbuffer_utils  # noqa: E402

layers = keras.layers
BATCH, STEPS, INPUT = 2, 5, 4


def keras_model(name, build, seed):
    keras.utils.set_random_seed(seed)
    x = keras.Input((STEPS, INPUT), batch_size=BATCH, name="sequence")
    return keras.Model(x, build(x), name=name)


def convert(model):
    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


class Builder:
    """One subgraph holding one operator, built with the schema's object API."""

    def __init__(self):
        self.model = fb.ModelT()
        self.model.version = 3
        self.model.buffers = [fb.BufferT()]  # buffer 0: empty, by convention
        self.sub = fb.SubGraphT()
        self.sub.tensors, self.sub.operators = [], []
        self.model.subgraphs = [self.sub]
        self.model.operatorCodes = []

    def tensor(self, name, shape, data=None, variable=False):
        t = fb.TensorT()
        t.name, t.shape, t.type = name, list(shape), fb.TensorType.FLOAT32
        t.isVariable = variable
        t.buffer = 0
        if data is not None:
            b = fb.BufferT()
            b.data = np.asarray(data, np.float32).tobytes()
            self.model.buffers.append(b)
            t.buffer = len(self.model.buffers) - 1
        self.sub.tensors.append(t)
        return len(self.sub.tensors) - 1

    def operator(self, code, options_type, options, inputs, outputs):
        oc = fb.OperatorCodeT()
        oc.builtinCode = code
        oc.deprecatedBuiltinCode = min(code, 127)
        oc.version = 1
        self.model.operatorCodes.append(oc)
        op = fb.OperatorT()
        op.opcodeIndex = len(self.model.operatorCodes) - 1
        op.inputs, op.outputs = list(inputs), list(outputs)
        op.builtinOptionsType, op.builtinOptions = options_type, options
        self.sub.operators.append(op)

    def finish(self, inputs, outputs):
        self.sub.inputs, self.sub.outputs = list(inputs), list(outputs)
        return flatbuffer_utils.convert_object_to_bytearray(self.model)


def weights(rng, *shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def lstm_inputs(b, rng, prefix, n_input, hidden, output, batch, cifg=False, peepholes=False,
                projection=False, layer_norm=False, state_indices=True):
    """The tensors of one LSTM direction, in the operator's input order: 4 input
    weights, 4 recurrent, 3 peepholes, 4 biases, projection weights and bias;
    then (returned apart) the two variable states and the 4 layer-norm
    coefficients. -1 marks an omitted tensor."""
    gates = ["input", "forget", "cell", "output"]
    ins = []
    for g in gates:
        ins.append(-1 if cifg and g == "input" else
                   b.tensor(f"{prefix}input_to_{g}_weights", (hidden, n_input), weights(rng, hidden, n_input)))
    for g in gates:
        ins.append(-1 if cifg and g == "input" else
                   b.tensor(f"{prefix}recurrent_to_{g}_weights", (hidden, output), weights(rng, hidden, output)))
    for g in ["input", "forget", "output"]:
        ins.append(b.tensor(f"{prefix}cell_to_{g}_weights", (hidden,), weights(rng, hidden))
                   if peepholes and not (cifg and g == "input") else -1)
    for g in gates:
        ins.append(-1 if cifg and g == "input" else
                   b.tensor(f"{prefix}{g}_gate_bias", (hidden,), weights(rng, hidden, scale=0.2)))
    if projection:
        ins.append(b.tensor(f"{prefix}projection_weights", (output, hidden), weights(rng, output, hidden)))
        ins.append(b.tensor(f"{prefix}projection_bias", (output,), weights(rng, output, scale=0.2)))
    else:
        ins += [-1, -1]
    states = [b.tensor(f"{prefix}output_state", (batch, output), variable=True),
              b.tensor(f"{prefix}cell_state", (batch, hidden), variable=True)]
    norm = [-1] * 4
    if layer_norm:
        norm = [-1 if cifg and g == "input" else
                b.tensor(f"{prefix}{g}_layer_norm_coefficients", (hidden,), 1.0 + weights(rng, hidden, scale=0.3))
                for g in gates]
    return ins, states, norm


def unidirectional_lstm(seed, time_major, hidden, output, cell_clip=0.0, proj_clip=0.0, **kw):
    rng = np.random.default_rng(seed)
    b = Builder()
    shape = (STEPS, BATCH, INPUT) if time_major else (BATCH, STEPS, INPUT)
    x = b.tensor("sequence", shape)
    ins, states, norm = lstm_inputs(b, rng, "", INPUT, hidden, output, BATCH, **kw)
    out_shape = (STEPS, BATCH, output) if time_major else (BATCH, STEPS, output)
    y = b.tensor("lstm", out_shape)
    o = fb.UnidirectionalSequenceLSTMOptionsT()
    o.fusedActivationFunction = fb.ActivationFunctionType.TANH
    o.cellClip, o.projClip = cell_clip, proj_clip
    o.timeMajor = time_major
    b.operator(fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM,
               fb.BuiltinOptions.UnidirectionalSequenceLSTMOptions, o, [x] + ins + states + norm, [y])
    return b.finish([x], [y])


def rnn(seed):
    rng = np.random.default_rng(seed)
    b, hidden = Builder(), 6
    x = b.tensor("sequence", (STEPS, BATCH, INPUT))
    w = b.tensor("input_weights", (hidden, INPUT), weights(rng, hidden, INPUT))
    r = b.tensor("recurrent_weights", (hidden, hidden), weights(rng, hidden, hidden, scale=0.3))
    bias = b.tensor("bias", (hidden,), weights(rng, hidden, scale=0.2))
    h = b.tensor("hidden_state", (BATCH, hidden), variable=True)
    y = b.tensor("rnn", (STEPS, BATCH, hidden))
    o = fb.SequenceRNNOptionsT()
    o.timeMajor, o.fusedActivationFunction = True, fb.ActivationFunctionType.RELU
    b.operator(fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_RNN, fb.BuiltinOptions.SequenceRNNOptions, o,
               [x, w, r, bias, h], [y])
    return b.finish([x], [y])


def bidirectional(seed):
    rng = np.random.default_rng(seed)
    b, hidden = Builder(), 5
    x = b.tensor("sequence", (STEPS, BATCH, INPUT))
    fw, fw_states, _ = lstm_inputs(b, rng, "fw_", INPUT, hidden, hidden, BATCH)
    bw, bw_states, _ = lstm_inputs(b, rng, "bw_", INPUT, hidden, hidden, BATCH, peepholes=True)
    y = b.tensor("bidirectional", (STEPS, BATCH, 2 * hidden))
    o = fb.BidirectionalSequenceLSTMOptionsT()
    o.fusedActivationFunction = fb.ActivationFunctionType.TANH
    o.mergeOutputs, o.timeMajor = True, True
    # 0 input, 1-17 forward, 18-34 backward, 35-38 states, 39-47 auxiliary input.
    ins = [x] + fw + bw + fw_states + bw_states + [-1] * 9
    b.operator(fb.BuiltinOperator.BIDIRECTIONAL_SEQUENCE_LSTM,
               fb.BuiltinOptions.BidirectionalSequenceLSTMOptions, o, ins, [y])
    return b.finish([x], [y])


def interpreter(tflite_bytes):
    """The TFLite interpreter with its builtin kernels only (no XNNPACK delegate)."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        Interpreter, OpResolverType = tf.lite.Interpreter, tf.lite.experimental.OpResolverType
    return Interpreter(
        model_content=tflite_bytes,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )


def write_case(out_dir, name, tflite_bytes, seed, keras_reference=None):
    d = os.path.join(out_dir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(d, "model.tflite"), "wb") as f:
        f.write(tflite_bytes)
    interp = interpreter(tflite_bytes)
    interp.allocate_tensors()
    rng = np.random.default_rng(seed)
    (det,) = interp.get_input_details()
    x = rng.standard_normal(det["shape"]).astype(np.float32)
    interp.set_tensor(det["index"], x)
    write_tensor(os.path.join(data, "input_0.pb"), x, det["name"])
    interp.invoke()
    (out,) = interp.get_output_details()
    y = interp.get_tensor(out["index"])
    write_tensor(os.path.join(data, "output_0.pb"), y, out["name"])
    if keras_reference is not None:
        err = np.abs(keras_reference(x) - y).max()
        assert err < 1e-4, f"{name}: the interpreter differs from Keras by {err}"
    ops = sorted({op["op_name"] for op in interp._get_ops_details()})
    print(f"{name}: {len(tflite_bytes)} bytes, ops: {', '.join(ops)}, output {list(y.shape)} "
          f"in [{y.min():.4g}, {y.max():.4g}]")


def write_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.asarray(array), name).SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "tflite_recurrent"))
    ap.add_argument("names", nargs="*", help="cases to build (default: all)")
    args = ap.parse_args()
    keras_cases = {
        "keras_lstm_sequence": lambda x: layers.LSTM(8, return_sequences=True)(x),
        "keras_lstm_stacked": lambda x: layers.LSTM(6)(layers.LSTM(8, return_sequences=True)(x)),
        "keras_bidirectional": lambda x: layers.Bidirectional(layers.LSTM(6, return_sequences=True))(x),
        "keras_lstm_backwards": lambda x: layers.LSTM(6, go_backwards=True, return_sequences=True)(x),
    }
    built = {
        "lstm_peephole_projection": lambda seed: unidirectional_lstm(
            seed, False, 6, 4, peepholes=True, projection=True, cell_clip=0.6, proj_clip=0.3),
        "lstm_cifg_layer_norm": lambda seed: unidirectional_lstm(
            seed, True, 6, 6, cifg=True, peepholes=True, layer_norm=True),
        "rnn_relu": rnn,
        "bidirectional_merged": bidirectional,
    }
    # Each case's weights come from its seed, its input from 100 + that seed.
    seeds = {name: s for s, name in enumerate(list(keras_cases) + list(built), start=1)}
    for name in args.names or seeds:
        if name in keras_cases:
            model = keras_model(name, keras_cases[name], seeds[name])
            write_case(args.out, name, convert(model), 100 + seeds[name], lambda x, m=model: m(x).numpy())
        else:
            write_case(args.out, name, built[name](seeds[name]), 100 + seeds[name])


if __name__ == "__main__":
    main()
