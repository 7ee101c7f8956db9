#!/usr/bin/env python3
"""Generates the TFLite test models and their reference outputs.

Each model is a Keras model with seeded random weights, converted with
tf.lite.TFLiteConverter (float32, no quantization), and run by the TFLite
interpreter on a seeded input. Writes, per model:

    models/<name>/model.tflite
    models/<name>/test_data_set_0/input_0.pb    (onnx TensorProto)
    models/<name>/test_data_set_0/output_0.pb   (the interpreter's output)

Models: tflite_cnn (NHWC CNN with fused activations), tflite_cnn_f16 (the same
network with float16 weights, i.e. DEQUANTIZE ops), tflite_transformer (one
transformer encoder block), tflite_ops (standalone activations, resize and slice
variants), tflite_decoder (TRANSPOSE_CONV, PRELU, SPLIT, SPLIT_V, UNPACK, PACK,
GATHER), tflite_logic (integer and boolean ops on ids and masks), tflite_tf_ops
(TensorFlow ops kept as builtins: space/depth/batch rearrangements, mirror pads,
normalizations, index selection, bitwise ops). `--full` also builds Keras MobileNetV2 (weights=None,
seeded) into models/full/tflite_mobilenetv2/ (gitignored).

Usage: python scripts/gen_tflite_models.py [--full] [--out models] [NAME ...]
Requirements: scripts/requirements-tflite.txt
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from onnx import numpy_helper  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
layers = keras.layers


def cnn(seed=1):
    """A small NHWC CNN touching every layout-sensitive TFLite op we import."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((32, 32, 3), batch_size=1, name="image")
    # CONV_2D with fused RELU6 (batch norm folds into the conv).
    x = layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(x_in)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU(6.0)(x)
    # DEPTHWISE_CONV_2D (depth multiplier 2, dilation 2), fused RELU.
    y = layers.DepthwiseConv2D(3, depth_multiplier=2, dilation_rate=2, padding="same", activation="relu")(x)
    y = layers.Conv2D(16, 1, activation="tanh")(y)
    # ADD residual; MUL, SUB and DIV by tensors of other shapes (broadcast).
    x = layers.Add()([x, y])
    x = layers.Lambda(lambda t: t * tf.constant(np.linspace(0.5, 1.5, 16, dtype=np.float32)))(x)
    x = layers.Lambda(lambda t: (t - 0.25) / tf.constant(np.linspace(1.0, 2.0, 16, dtype=np.float32)))(x)
    # Hard swish, sigmoid.
    x = layers.Activation("hard_swish")(x)
    a = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    b = layers.AveragePooling2D(2, strides=2, padding="valid")(x)
    b = layers.Activation("sigmoid")(b)
    # CONCATENATION on the channel axis.
    x = layers.Concatenate(axis=-1)([a, b])
    # PAD and PADV2 (non-zero pad value), a strided conv and AVERAGE_POOL with SAME padding.
    x = layers.ZeroPadding2D(((1, 0), (0, 1)))(x)
    x = layers.Lambda(lambda t: tf.pad(t, [[0, 0], [1, 1], [0, 1], [0, 0]], constant_values=0.5))(x)
    x = layers.Conv2D(24, 3, strides=(2, 1), padding="valid", activation="relu")(x)
    x = layers.AveragePooling2D(3, strides=1, padding="same")(x)
    # RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR.
    up = layers.UpSampling2D(2, interpolation="bilinear")(x)
    nn = layers.Lambda(lambda t: tf.image.resize(t, (10, 12), method="nearest"))(x)
    up = layers.Lambda(lambda t: tf.image.resize(t, (10, 12), method="bilinear"))(up)
    x = layers.Add()([up, nn])
    x = layers.Lambda(lambda t: tf.compat.v1.image.resize_bilinear(t, (5, 7), align_corners=True))(x)
    # MEAN (global average pooling), FULLY_CONNECTED, SOFTMAX.
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(10)(x)
    x = layers.Softmax()(x)
    return keras.Model(x_in, x, name="tflite_cnn")


def transformer(seed=2, seq=16, dim=32, heads=4):
    """One transformer encoder block on [1, seq, dim] token embeddings."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((seq, dim), batch_size=1, name="tokens")
    x = layers.Dense(dim)(x_in)
    h = layers.LayerNormalization(epsilon=1e-5)(x)
    h = layers.MultiHeadAttention(heads, dim // heads)(h, h)
    x = layers.Add()([x, h])
    h = layers.LayerNormalization(epsilon=1e-5)(x)
    h = layers.Dense(2 * dim, activation="gelu")(h)
    h = layers.Dense(dim)(h)
    x = layers.Add()([x, h])
    # BATCH_MATMUL with a transposed operand, TRANSPOSE, SQUEEZE and STRIDED_SLICE.
    g = layers.Lambda(lambda t: tf.matmul(t, t, transpose_b=True) * (1.0 / dim))(x)
    g = layers.Lambda(lambda t: tf.transpose(t, [0, 2, 1]))(g)
    x = layers.Lambda(lambda ts: tf.matmul(ts[0], ts[1]))([g, x])
    cls = layers.Lambda(lambda t: t[:, 0:1, :])(x)
    cls = layers.Lambda(lambda t: tf.squeeze(t, axis=1))(cls)
    last = layers.Lambda(lambda t: t[:, -1, ::2])(x)
    x = layers.Concatenate()([cls, last])
    x = layers.Dense(10, activation="softmax")(x)
    return keras.Model(x_in, x, name="tflite_transformer")


def ops(seed=4):
    """Standalone ops and attribute variants the two models above do not reach."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((6, 10, 4), batch_size=1, name="x")
    L = layers.Lambda
    x = L(lambda t: tf.nn.relu(t) - tf.nn.relu6(2.0 * t - 1.0) + tf.nn.leaky_relu(t, alpha=0.3))(x_in)
    x = L(lambda t: tf.exp(-tf.abs(t)) + tf.sqrt(tf.abs(t) + 1.0) + tf.math.log(tf.abs(t) + 2.0))(x)
    x = L(lambda t: tf.maximum(t, 1.2) + tf.minimum(t, 0.9) + tf.math.rsqrt(t * t + 1.0))(x)
    # Resize variants: legacy asymmetric bilinear, nearest with aligned corners and asymmetric.
    a = L(lambda t: tf.compat.v1.image.resize_bilinear(t, (9, 7)))(x)
    b = L(lambda t: tf.compat.v1.image.resize_nearest_neighbor(t, (9, 7), align_corners=True))(x)
    c = L(lambda t: tf.compat.v1.image.resize_nearest_neighbor(t, (9, 7)))(x)
    x = layers.Concatenate()([a, b, c])
    # Strided slices with negative strides and masks, SQUEEZE, SUM and REDUCE_MAX.
    x = L(lambda t: t[:, ::-2, 1:6, :])(x)
    s = L(lambda t: tf.reduce_sum(t[:, 1:3, :, :], axis=1) - 2.0 * tf.reduce_max(t, axis=[1, 2], keepdims=True)[:, 0])(x)
    s = L(lambda t: tf.squeeze(tf.reshape(t, (1, 5, 1, 12)), axis=2))(s)
    return keras.Model(x_in, s, name="tflite_ops")


def logic(seed=6):
    """Integer and boolean ops as language models use them on ids and masks
    (CAST, comparisons, LOGICAL_*, SELECT_V2, TILE, EXPAND_DIMS, SLICE on int32),
    and float POW, SQUARE, SIN, COS and BROADCAST_TO."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((8, 6), batch_size=1, name="x")

    def f(t):
        ids = tf.cast(tf.round(t * 3.0), tf.int32)
        m = tf.logical_or(tf.equal(ids, 0), tf.greater_equal(ids, 2))
        m = tf.logical_and(m, tf.logical_not(tf.less_equal(ids, -3)))
        m = tf.logical_or(m, tf.not_equal(ids, ids[:, :1, :]))
        k = tf.where(m, ids * 2 - 1, tf.minimum(ids, 1))
        k = tf.tile(tf.expand_dims(k, 1), [1, 2, 1, 1])
        k = tf.slice(k, [0, 0, 1, 0], [1, 2, 6, -1])
        z = tf.pow(t, 3.0) + tf.square(t) + tf.sin(t) * tf.cos(t)
        z = tf.broadcast_to(tf.expand_dims(z[:, 1:7], 1), [1, 2, 6, 6])
        return tf.cast(k, tf.float32) * z

    return keras.Model(x_in, layers.Lambda(f)(x_in), name="tflite_logic")


def tf_ops(seed=7):
    """TensorFlow ops the converter keeps as builtins of their own: space, depth
    and batch rearrangements (SPACE_TO_DEPTH, DEPTH_TO_SPACE, SPACE_TO_BATCH_ND,
    BATCH_TO_SPACE_ND), MIRROR_PAD both ways, LOCAL_RESPONSE_NORMALIZATION,
    L2_NORMALIZATION, LOG_SOFTMAX, ELU, SIGN, FLOOR_DIV, FLOOR_MOD, ADD_N, CUMSUM,
    ATAN2, ARG_MAX, ARG_MIN, TOPK_V2, GATHER_ND, SCATTER_ND, REDUCE_ANY, ONE_HOT
    (indices out of range included), and on int32 BITWISE_XOR, RIGHT_SHIFT,
    FLOOR_MOD, FLOOR_DIV and BITCAST."""
    del seed  # no weights

    def space(t):
        d = tf.nn.depth_to_space(tf.nn.space_to_depth(t, 2) * 1.5, 2)
        b = tf.space_to_batch_nd(t, [2, 2], [[1, 1], [0, 2]])
        b = tf.batch_to_space(tf.nn.elu(b) + 0.5, [2, 2], [[1, 1], [0, 2]])
        r = tf.pad(t, [[0, 0], [1, 2], [2, 1], [0, 0]], mode="REFLECT")
        s = tf.pad(t, [[0, 0], [2, 1], [1, 3], [0, 0]], mode="SYMMETRIC")
        lrn = tf.nn.local_response_normalization(t, depth_radius=1, bias=1.5, alpha=0.3, beta=0.75)
        l2 = tf.math.l2_normalize(t, axis=-1)
        m = tf.math.floormod(t, 0.7) + tf.math.floordiv(t, 0.45) + tf.sign(t)
        c = tf.math.cumsum(t, axis=2, exclusive=True, reverse=True)
        angle = tf.math.atan2(t, tf.reverse(t, [1]) - 0.3)
        y = tf.add_n([d, b, lrn, l2 * 2.0, m, c, tf.nn.log_softmax(t), angle])
        return tf.concat([y, r[:, 1:9, 2:10, :] - s[:, :8, :8, :]], axis=3)

    def index(t):
        flat = tf.reshape(t, (1, 256))
        values, at = tf.math.top_k(flat, k=5)
        best = tf.concat([tf.cast(tf.argmax(t, axis=3), tf.float32),
                          tf.cast(tf.argmin(t, axis=1, output_type=tf.int32), tf.float32)], axis=2)
        picked = tf.gather_nd(t[0], [[1, 2], [3, 4], [7, 0]])
        spread = tf.scatter_nd([[2], [5], [2]], picked, (8, 4))
        any_pos = tf.cast(tf.reduce_any(t > 1.0, axis=[1, 3]), tf.float32)
        ids = tf.cast(tf.round(t * 40.0), tf.int32)
        bits = tf.bitwise.right_shift(tf.bitwise.bitwise_xor(ids, 0x5A), 2)
        as_float = tf.bitcast(tf.math.floormod(ids, 256) * 4096 + 0x3F800000, tf.float32)
        ints = tf.cast(bits + tf.math.floordiv(ids, -3), tf.float32) + as_float
        hot = tf.one_hot(tf.math.floormod(ids[0, :, 0, 0], 6) - 1, 4, on_value=2.5, off_value=-0.5, axis=0)
        return tf.concat([
            tf.reshape(values, (5,)), tf.cast(tf.reshape(at, (5,)), tf.float32), tf.reshape(best, (-1,)),
            tf.reshape(spread, (-1,)), tf.reshape(any_pos, (-1,)), tf.reshape(ints, (-1,)),
            tf.reshape(hot, (-1,)),
        ], axis=0)

    @tf.function(input_signature=[tf.TensorSpec((1, 8, 8, 4), tf.float32, name="x")])
    def model(x):
        return {"space": space(x), "index": index(x)}

    return model


def decoder(seed=5):
    """An upsampling head: transposed convolutions (SAME and VALID) with PReLU, then
    channel splits (equal and by sizes), rows unpacked and packed in reverse, and a
    gather of columns."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((5, 6, 4), batch_size=1, name="x")
    y = layers.Conv2DTranspose(6, 3, strides=2, padding="same")(x_in)
    y = layers.PReLU(shared_axes=[1, 2], alpha_initializer=keras.initializers.Constant(0.2))(y)
    v = layers.Conv2DTranspose(6, 2, strides=2, padding="valid", activation="relu")(x_in)

    def mix(t):
        a, b = tf.split(t, 2, axis=3)
        c, d, e = tf.split(t, [1, 3, 2], axis=3)
        r = tf.stack(tf.unstack(a, axis=1)[::-1], axis=1)
        g = tf.gather(b, [3, 0, 2, 2, 5, 1, 7, 8, 9, 4, 11, 10], axis=2)
        return tf.concat([r * d, g[..., :2] - e, c * b], axis=3)

    return keras.Model(x_in, layers.Lambda(mix)(layers.Add()([y, v])), name="tflite_decoder")


def mobilenetv2(seed=3):
    keras.utils.set_random_seed(seed)
    model = keras.applications.MobileNetV2(input_shape=(224, 224, 3), weights=None, classes=1000)
    calibrate_batchnorm(model, seed)
    return model


def calibrate_batchnorm(model, seed):
    """Sets every BatchNormalization's moving statistics from the activations it sees
    on a seeded calibration batch, in network order, as training would leave them.
    With the initial statistics (mean 0, variance 1) the activations of a deep random
    network shrink towards zero and the softmax output is uniform to float precision."""
    x = np.random.default_rng(seed + 100).standard_normal((4,) + tuple(model.input.shape[1:])).astype(np.float32)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            a = keras.Model(model.input, layer.input)(x, training=False).numpy()
            axes = tuple(range(a.ndim - 1))
            gamma, beta, _, _ = layer.get_weights()
            layer.set_weights([gamma, beta, a.mean(axis=axes), a.var(axis=axes)])


def convert(model, float16=False):
    """Converts a Keras model or a tf.function to TFLite flatbuffer bytes (float32
    unless `float16`)."""
    if isinstance(model, keras.Model):
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
    else:
        converter = tf.lite.TFLiteConverter.from_concrete_functions([model.get_concrete_function()], model)
    if float16:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


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


def write_model(out_dir, name, tflite_bytes, seed):
    d = os.path.join(out_dir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(d, "model.tflite"), "wb") as f:
        f.write(tflite_bytes)
    interp = interpreter(tflite_bytes)
    interp.allocate_tensors()
    rng = np.random.default_rng(seed)
    for i, det in enumerate(interp.get_input_details()):
        x = rng.standard_normal(det["shape"]).astype(np.float32)
        interp.set_tensor(det["index"], x)
        write_tensor(os.path.join(data, f"input_{i}.pb"), x, det["name"])
    interp.invoke()
    for i, det in enumerate(interp.get_output_details()):
        y = interp.get_tensor(det["index"])
        write_tensor(os.path.join(data, f"output_{i}.pb"), y, det["name"])
    ops = sorted({op["op_name"] for op in interp._get_ops_details()})
    print(f"{name}: {len(tflite_bytes)} bytes, ops: {', '.join(ops)}")
    print(f"  output range [{y.min():.4g}, {y.max():.4g}]")


def write_tensor(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.asarray(array), name).SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "models"))
    ap.add_argument("--full", action="store_true", help="also build MobileNetV2 into <out>/full/")
    ap.add_argument("names", nargs="*", help="models to build (default: all)")
    args = ap.parse_args()
    builds = {
        "tflite_cnn": lambda: convert(cnn()),
        "tflite_cnn_f16": lambda: convert(cnn(), float16=True),
        "tflite_transformer": lambda: convert(transformer()),
        "tflite_ops": lambda: convert(ops()),
        "tflite_decoder": lambda: convert(decoder()),
        "tflite_logic": lambda: convert(logic()),
        "tflite_tf_ops": lambda: convert(tf_ops()),
    }
    seeds = {"tflite_cnn": 10, "tflite_cnn_f16": 11, "tflite_transformer": 12, "tflite_ops": 14, "tflite_decoder": 15,
             "tflite_logic": 16, "tflite_tf_ops": 17}
    for name in args.names or builds:
        write_model(args.out, name, builds[name](), seed=seeds[name])
    if args.full:
        full = os.path.join(args.out, "full")
        write_model(full, "tflite_mobilenetv2", convert(mobilenetv2()), seed=13)


if __name__ == "__main__":
    main()
