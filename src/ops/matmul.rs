//! MatMul (numpy semantics), Gemm and Det. Floats compute in f64; integer
//! MatMul is exact in i64 (wrapping). Rows of each product are computed in
//! parallel.

use super::index::broadcast_indices;
use super::onnx::*;
use super::shape::*;
use super::te::*;
use super::*;
use crate::core::{numel, DType, Tensor, TensorData, ValueType};
use crate::ops::broadcast_shapes;
use rayon::prelude::*;

impl OpDef for Gemm {
    fn name(&self) -> &'static str {
        "Gemm"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Gemm {
            trans_a, trans_b, ..
        } = self;

        expect_inputs(inputs, 2, 3)?;
        let (a, b) = (inputs[0], inputs[1]);
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return Err(OpError::Shape(format!(
                "operands must be matrices, got {:?} and {:?}",
                a.shape, b.shape
            )));
        }
        let (m, ka) = as_multiplied(&a.shape, *trans_a);
        let (kb, n) = as_multiplied(&b.shape, *trans_b);
        if ka != kb {
            return Err(OpError::Shape(format!(
                "inner dimensions differ: A {:?} (trans {trans_a}), B {:?} (trans {trans_b})",
                a.shape, b.shape
            )));
        }
        if let Some(c) = inputs.get(2) {
            let s = broadcast_shapes(&c.shape, &[m, n])?;
            if s != [m, n] {
                return Err(OpError::Shape(format!(
                    "C shape {:?} does not broadcast to [{m}, {n}]",
                    c.shape
                )));
            }
        }
        Ok(vec![ValueType::new(a.dtype, vec![m, n])])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![gemm(self, x, &outputs[0])?])
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        contraction_pad_flow(inputs, padded)
    }

    fn flops(&self, ins: &[&ValueType], outs: &[&ValueType]) -> f64 {
        let k = as_multiplied(&ins[0].shape, self.trans_a).1;
        2.0 * numel(&outs[0].shape) as f64 * k as f64
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.parts();
        check_arity(self.name(), types, 2)?;
        let (sa, sb) = (operand_shape(types, 0), operand_shape(types, 1));
        if sa.len() != 2 || sb.len() != 2 {
            return Err(unsupported(self.name(), "Gemm operands must be matrices"));
        }
        let (m, k) = as_multiplied(&sa, self.trans_a);
        let n = as_multiplied(&sb, self.trans_b).1;
        let (a, b) = (ph[0], ph[1]);
        let (ta, tb) = (self.trans_a, self.trans_b);
        let ab = g.reduce(
            &format!("AB{sfx}"),
            &[e(m), e(n)],
            &[e(k)],
            ReduceOp::Sum,
            |i, r| {
                let (i0, i1, rk) = (i[0].clone(), i[1].clone(), r[0].clone());
                let av = if ta {
                    a.at(&[rk.clone(), i0])
                } else {
                    a.at(&[i0, rk.clone()])
                };
                let bv = if tb { b.at(&[i1, rk]) } else { b.at(&[rk, i1]) };
                av * bv
            },
        )?;
        let (al, be) = (self.alpha as f64, self.beta as f64);
        let c = ph.get(2).copied();
        let sc = types
            .get(2)
            .map(|_| operand_shape(types, 2))
            .unwrap_or_default();
        Ok(Defined::output(g.compute(
            &format!("Y{sfx}"),
            &[e(m), e(n)],
            |i| {
                let prod = ab.at(i) * al;
                match c {
                    Some(c) => prod + c.at(&broadcast_index(i, &sc)) * be,
                    None => prod,
                }
            },
        )?))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        cx.single(
            "Gemm",
            cx.inputs,
            vec![
                ("alpha", Attr::Float(self.alpha)),
                ("beta", Attr::Float(self.beta)),
                ("transA", Attr::Int(self.trans_a as i64)),
                ("transB", Attr::Int(self.trans_b as i64)),
            ],
        )
    }
}

impl OpDef for MatMul {
    fn name(&self) -> &'static str {
        "MatMul"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 2, 2)?;
        let (a, b) = (inputs[0], inputs[1]);
        if a.shape.is_empty() || b.shape.is_empty() {
            return Err(OpError::Shape("operands must have rank at least 1".into()));
        }
        let mut sa = a.shape.clone();
        let mut sb = b.shape.clone();
        let (va, vb) = (sa.len() == 1, sb.len() == 1);
        if va {
            sa.insert(0, 1);
        }
        if vb {
            sb.push(1);
        }
        let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
        let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
        if k != k2 {
            return Err(OpError::Shape(format!(
                "inner dimensions differ: {:?} x {:?}",
                a.shape, b.shape
            )));
        }
        let mut shape = broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
        if !va {
            shape.push(m);
        }
        if !vb {
            shape.push(n);
        }
        Ok(vec![ValueType::new(a.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        Ok(vec![matmul(x[0], x[1], out)?])
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        contraction_pad_flow(inputs, padded)
    }

    fn flops(&self, ins: &[&ValueType], outs: &[&ValueType]) -> f64 {
        let k = *ins[0].shape.last().unwrap_or(&1);
        2.0 * numel(&outs[0].shape) as f64 * k as f64
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.parts();
        let arity = |n: usize| check_arity(self.name(), types, n);

        arity(2)?;
        Ok(Defined::output(matmul_compute(
            g,
            sfx,
            ph[0],
            ph[1],
            &types[0].shape,
            &types[1].shape,
        )?))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        cx.single("MatMul", cx.inputs, vec![])
    }
}

impl OpDef for Det {
    fn name(&self) -> &'static str {
        "Det"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        if !x.dtype.is_float() {
            return Err(OpError::DType(format!(
                "Det takes floats, got {}",
                x.dtype.name()
            )));
        }
        match x.shape.last_chunk::<2>() {
            Some([m, n]) if m == n => {}
            _ => {
                return Err(OpError::Shape(format!(
                    "Det takes square matrices in its last two axes, got {:?}",
                    x.shape
                )))
            }
        }
        let batch = x.shape[..x.shape.len() - 2].to_vec();
        Ok(vec![ValueType::new(x.dtype, batch)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let m = x[0].shape[x[0].shape.len() - 1];
        let mut values = x[0].data.to_f64();
        let dets = determinants(&mut values, m, numel(&out.shape));
        let data = TensorData::from_f64(out.dtype, dets);
        Ok(vec![Tensor::new(out.shape.clone(), data)])
    }

    /// LU decomposition: about (2/3) m³ per matrix.
    fn flops(&self, ins: &[&ValueType], outs: &[&ValueType]) -> f64 {
        let m = *ins[0].shape.last().unwrap_or(&0) as f64;
        numel(&outs[0].shape) as f64 * 2.0 / 3.0 * m * m * m
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        cx.single("Det", cx.inputs, vec![])
    }
}

/// The determinants of the `count` row-major `m`x`m` matrices laid one after
/// another in `matrices` (overwritten by their LU factors): Gaussian
/// elimination with partial pivoting, in f64. The determinant of a 0x0
/// matrix is 1.
pub fn determinants(matrices: &mut [f64], m: usize, count: usize) -> Vec<f64> {
    if m == 0 {
        return vec![1.0; count];
    }
    matrices
        .chunks_mut(m * m)
        .map(|a| determinant(a, m))
        .collect()
}

/// The determinant of the row-major `m`x`m` matrix `a`, which it overwrites.
fn determinant(a: &mut [f64], m: usize) -> f64 {
    let mut det = 1.0;
    for k in 0..m {
        // The largest remaining entry of column k as the pivot keeps the
        // multipliers at most 1 in magnitude.
        let pivot = (k..m)
            .max_by(|&i, &j| a[i * m + k].abs().total_cmp(&a[j * m + k].abs()))
            .unwrap_or(k);
        if a[pivot * m + k] == 0.0 {
            return 0.0;
        }
        if pivot != k {
            for j in 0..m {
                a.swap(k * m + j, pivot * m + j);
            }
            det = -det;
        }
        let d = a[k * m + k];
        det *= d;
        for i in k + 1..m {
            let f = a[i * m + k] / d;
            for j in k + 1..m {
                a[i * m + j] -= f * a[k * m + j];
            }
        }
    }
    det
}

/// An accumulator element type.
trait Num: Copy + Send + Sync {
    const ZERO: Self;
    /// self + a * b
    fn mul_add(self, a: Self, b: Self) -> Self;
}

impl Num for f64 {
    const ZERO: f64 = 0.0;
    fn mul_add(self, a: f64, b: f64) -> f64 {
        self + a * b
    }
}

impl Num for i128 {
    const ZERO: i128 = 0;
    fn mul_add(self, a: i128, b: i128) -> i128 {
        self.wrapping_add(a.wrapping_mul(b))
    }
}

/// `c = a · b` for an m×k matrix `a` and a k×n matrix `b`, each given with its
/// (row step, column step) so transposed operands need no copy; m is c.len() / n.
fn matmul_2d<T: Num>(
    a: &[T],
    a_steps: (usize, usize),
    b: &[T],
    b_steps: (usize, usize),
    k: usize,
    n: usize,
    c: &mut [T],
) {
    if n == 0 {
        return;
    }
    c.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
        row.fill(T::ZERO);
        for p in 0..k {
            let av = a[i * a_steps.0 + p * a_steps.1];
            let b_row = b[p * b_steps.0..].iter().step_by(b_steps.1);
            for (cv, &bv) in row.iter_mut().zip(b_row) {
                *cv = cv.mul_add(av, bv);
            }
        }
    });
}

pub(super) fn matmul(a: &Tensor, b: &Tensor, out: &ValueType) -> Result<Tensor, OpError> {
    // 1-D operands become a row (a) or a column (b); the output shape already
    // drops those axes again, and the element order is the same.
    let mut sa = a.shape.clone();
    let mut sb = b.shape.clone();
    if sa.len() == 1 {
        sa.insert(0, 1);
    }
    if sb.len() == 1 {
        sb.push(1);
    }
    let (ra, rb) = (sa.len(), sb.len());
    let (m, k, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 1]);
    let batch = broadcast_shapes(&sa[..ra - 2], &sb[..rb - 2])?;
    let (ai, bi) = (
        broadcast_indices(&sa[..ra - 2], &batch),
        broadcast_indices(&sb[..rb - 2], &batch),
    );
    fn batched<T: Num>(
        av: &[T],
        bv: &[T],
        (ai, bi): (&[usize], &[usize]),
        (m, k, n): (usize, usize, usize),
    ) -> Vec<T> {
        let mut c = vec![T::ZERO; ai.len() * m * n];
        for (t, (&x, &y)) in ai.iter().zip(bi).enumerate() {
            let (a, b) = (&av[x * m * k..][..m * k], &bv[y * k * n..][..k * n]);
            matmul_2d(a, (k, 1), b, (n, 1), k, n, &mut c[t * m * n..][..m * n]);
        }
        c
    }
    let dims = (m, k, n);
    let data = match a.dtype() {
        DType::Bool => return Err(OpError::DType("not defined on bool tensors".into())),
        d if d.is_float() => {
            let c = batched(&a.data.to_f64(), &b.data.to_f64(), (&ai, &bi), dims);
            TensorData::from_f64(out.dtype, c)
        }
        _ => {
            let c = batched(&a.data.to_i128(), &b.data.to_i128(), (&ai, &bi), dims);
            TensorData::from_i128(out.dtype, c)
        }
    };
    Ok(Tensor::new(out.shape.clone(), data))
}

/// The (rows, columns) of a Gemm matrix operand of `shape` as it is multiplied:
/// transposed when `trans`.
fn as_multiplied(shape: &[usize], trans: bool) -> (usize, usize) {
    if trans {
        (shape[1], shape[0])
    } else {
        (shape[0], shape[1])
    }
}

/// `alpha * op(a) · op(b) + beta * c`, in f64 for every dtype (integer results are
/// truncated like a C cast).
pub(super) fn gemm(op: &Gemm, inputs: &[&Tensor], out: &ValueType) -> Result<Tensor, OpError> {
    let Gemm {
        alpha,
        beta,
        trans_a,
        trans_b,
    } = *op;
    let (a, b) = (inputs[0], inputs[1]);
    if a.dtype() == DType::Bool {
        return Err(OpError::DType("not defined on bool tensors".into()));
    }
    let (m, n) = (out.shape[0], out.shape[1]);
    let k = as_multiplied(&a.shape, trans_a).1;
    // A stored k×m (transposed) reads a(i, p) at p*m + i; B stored n×k at j*k + p.
    let a_steps = if trans_a { (1, m) } else { (k, 1) };
    let b_steps = if trans_b { (1, k) } else { (n, 1) };
    let mut y = vec![0.0; m * n];
    matmul_2d(
        &a.data.to_f64(),
        a_steps,
        &b.data.to_f64(),
        b_steps,
        k,
        n,
        &mut y,
    );
    let (alpha, beta) = (alpha as f64, beta as f64);
    y.iter_mut().for_each(|v| *v *= alpha);
    if let Some(c) = inputs.get(2) {
        let cv = c.data.to_f64();
        for (v, i) in y.iter_mut().zip(broadcast_indices(&c.shape, &out.shape)) {
            *v += beta * cv[i];
        }
    }
    debug_assert_eq!(numel(&out.shape), y.len());
    Ok(Tensor::new(
        out.shape.clone(),
        TensorData::from_f64(out.dtype, y),
    ))
}

/// MatMul with numpy semantics: batch axes broadcast; a rank-1 operand is a row
/// (left) or a column (right) whose axis the result drops.
fn matmul_compute(
    g: &mut ComputeGraph,
    sfx: &str,
    a: TeTensor,
    b: TeTensor,
    sa: &[usize],
    sb: &[usize],
) -> Result<TeTensor, TirError> {
    if sa.is_empty() || sb.is_empty() {
        return Err(TirError::Definition("MatMul of a scalar".into()));
    }
    let (ra, rb) = (sa.len(), sb.len());
    let k = sa[ra - 1];
    let kb = if rb == 1 { sb[0] } else { sb[rb - 2] };
    if k != kb {
        return Err(TirError::Definition(format!(
            "MatMul inner extents differ: {sa:?} x {sb:?}"
        )));
    }
    let batch_a = if ra >= 2 { &sa[..ra - 2] } else { &[][..] };
    let batch_b = if rb >= 2 { &sb[..rb - 2] } else { &[][..] };
    let batch = broadcast_shapes(batch_a, batch_b)?;
    let nb = batch.len();
    let mut out: Vec<usize> = batch.clone();
    if ra >= 2 {
        out.push(sa[ra - 2]);
    }
    if rb >= 2 {
        out.push(sb[rb - 1]);
    }
    g.reduce(
        &format!("Y{sfx}"),
        &extents(&out),
        &[e(k)],
        ReduceOp::Sum,
        |i, r| {
            let mut pos = nb;
            let mut ia = broadcast_index(&i[..nb], batch_a);
            if ra >= 2 {
                ia.push(i[pos].clone());
                pos += 1;
            }
            ia.push(r[0].clone());
            let mut ib = broadcast_index(&i[..nb], batch_b);
            ib.push(r[0].clone());
            if rb >= 2 {
                ib.push(i[pos].clone());
            }
            a.at(&ia) * b.at(&ib)
        },
    )
}

/// The contraction may run over padding: both sides must hold 0 there for the
/// products to vanish whatever the other side holds.
fn contraction_pad_flow(inputs: &[PadValue], padded: &[usize]) -> PadFlow {
    let n = inputs.len();
    let mut req = vec![Requirement::Any; n];
    if !padded.is_empty() {
        req.iter_mut()
            .take(2)
            .for_each(|r| *r = Requirement::Value(0.0));
    }
    PadFlow {
        inputs: req,
        output: PadValue::Undef,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::ops::Op;
    use crate::ops::*;

    #[test]
    fn matmul_2d_and_vectors() {
        let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
        let b = f32s(&[2, 2], &[5., 6., 7., 8.]);
        assert_close(
            &eval1(Op::MatMul, &[&a, &b]),
            &[2, 2],
            &[19., 22., 43., 50.],
            0.0,
        );
        let (u, v) = (f32s(&[3], &[1., 2., 3.]), f32s(&[3], &[4., 5., 6.]));
        assert_close(&eval1(Op::MatMul, &[&u, &v]), &[], &[32.0], 0.0);
        let m = iota(&[2, 3]);
        let y = eval1(Op::MatMul, &[&f32s(&[2], &[1., 2.]), &m]);
        assert_close(&y, &[3], &[6., 9., 12.], 0.0);
        let y = eval1(Op::MatMul, &[&m, &f32s(&[3], &[1., 0., -1.])]);
        assert_close(&y, &[2], &[-2., -2.], 0.0);
    }

    #[test]
    fn matmul_broadcasts_batches() {
        // a [2,1,2,3] against b [3,3,2] → [2,3,2,2], checked by explicit loops.
        let a = iota(&[2, 1, 2, 3]);
        let b = f32s(
            &[3, 3, 2],
            &(0..18).map(|i| (i % 5) as f32 - 2.0).collect::<Vec<_>>(),
        );
        let y = eval1(Op::MatMul, &[&a, &b]);
        let (av, bv) = (a.to_f32(), b.to_f32());
        let mut want = vec![];
        for p in 0..2 {
            for q in 0..3 {
                for i in 0..2 {
                    for j in 0..2 {
                        let s: f32 = (0..3)
                            .map(|k| av[p * 6 + i * 3 + k] * bv[q * 6 + k * 2 + j])
                            .sum();
                        want.push(s as f64);
                    }
                }
            }
        }
        assert_close(&y, &[2, 3, 2, 2], &want, 0.0);
    }

    #[test]
    fn integer_matmul_is_exact() {
        // 2^40 * (2^20 + 1) + 3 * 1 = 2^60 + 2^40 + 3, beyond f64's 53 bits.
        let a = i64s(&[1, 2], &[1 << 40, 3]);
        let b = i64s(&[2, 1], &[(1 << 20) + 1, 1]);
        assert_i64(
            &eval1(Op::MatMul, &[&a, &b]),
            &[1, 1],
            &[(1 << 60) + (1 << 40) + 3],
        );
    }

    #[test]
    fn gemm_transposes_scales_and_broadcasts_c() {
        // A^T = [[1,3],[2,4]], B^T = [[1,1],[0,1]], A^T B^T = [[1,4],[2,6]];
        // 2 * that + 0.5 * [10, 20] = [[7,18],[9,22]].
        let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
        let b = f32s(&[2, 2], &[1., 0., 1., 1.]);
        let c = f32s(&[2], &[10., 20.]);
        let op = Op::Gemm(Gemm {
            alpha: 2.0,
            beta: 0.5,
            trans_a: true,
            trans_b: true,
        });
        assert_close(&eval1(op, &[&a, &b, &c]), &[2, 2], &[7., 18., 9., 22.], 0.0);
        // Non-square, no C: [1,3]x[3,2] with B given transposed ([2,3]).
        let op = Op::Gemm(Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: true,
        });
        let y = eval1(op, &[&f32s(&[1, 3], &[1., 2., 3.]), &iota(&[2, 3])]);
        assert_close(&y, &[1, 2], &[8., 26.], 0.0);
    }

    #[test]
    fn det_of_batched_matrices_pivots_and_finds_singular_ones() {
        // diag(2, 3); a row swap (-1); a 3x3 whose first pivot is 0 (det by
        // cofactors: 0·(5·9-6·8) - 2·(4·9-6·7) + 3·(4·8-5·7) = 12 - 9 = 3); a
        // singular one (second row twice the first).
        let x = f32s(&[2, 2, 2], &[2., 0., 0., 3., 0., 1., 1., 0.]);
        assert_close(&eval1(Op::Det, &[&x]), &[2], &[6., -1.], 0.0);
        let y = f32s(&[3, 3], &[0., 2., 3., 4., 5., 6., 7., 8., 9.]);
        assert_close(&eval1(Op::Det, &[&y]), &[], &[3.], 1e-12);
        let z = f32s(&[2, 2], &[1., 2., 2., 4.]);
        assert_close(&eval1(Op::Det, &[&z]), &[], &[0.], 0.0);
        // Not square: an error, not a panic.
        use crate::core::{DType, ValueType};
        let bad = ValueType::new(DType::F32, vec![2, 3]);
        assert!(Op::Det.def().infer(&[&bad]).is_err());
    }
}
