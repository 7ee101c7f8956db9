//! Local response normalization across channels (ONNX `LRN`, AlexNet-era
//! models): each element is divided by a power of the sum of squares of its
//! neighbours along the channel axis,
//! y[n, c, …] = x[n, c, …] / (bias + alpha / size · Σ x[n, c', …]²)^beta,
//! c' running over the `size` channels max(0, c − ⌊(size−1)/2⌋) ..=
//! min(C−1, c + ⌈(size−1)/2⌉).

use super::onnx::*;
use super::shape::*;
use super::te::*;
use super::*;
use crate::core::{numel, Tensor, TensorData, ValueType};

/// LRN: x of rank at least 3 (N, C, spatial...).
#[derive(Clone, Debug, PartialEq)]
pub struct Lrn {
    /// Scale of the sum of squares.
    pub alpha: f32,
    /// Exponent.
    pub beta: f32,
    /// Offset added to the scaled sum.
    pub bias: f32,
    /// Number of channels summed over.
    pub size: usize,
}

impl Lrn {
    /// The channels summed for channel `c`, before clamping: c − below ..= c + above.
    fn window(&self) -> (usize, usize) {
        let below = (self.size - 1) / 2;
        (below, self.size - 1 - below)
    }
}

impl OpDef for Lrn {
    fn name(&self) -> &'static str {
        "LRN"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_float(sole_input(inputs)?, "input")?;
        check_rank_at_least(inputs[0], 3, "input")?;
        if self.size == 0 {
            return Err(OpError::Attribute("size must be positive".into()));
        }
        Ok(vec![inputs[0].clone()])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let v = x[0].data.to_f64();
        let (channels, inner) = (out.shape[1], numel(&out.shape[2..]));
        let (below, above) = self.window();
        let scale = self.alpha as f64 / self.size as f64;
        let y = (0..v.len())
            .map(|i| {
                let (c, plane) = ((i / inner) % channels, i - (i / inner % channels) * inner);
                let first = c.saturating_sub(below);
                let last = (c + above).min(channels - 1);
                let sum: f64 = (first..=last).map(|k| v[plane + k * inner].powi(2)).sum();
                v[i] / (self.bias as f64 + scale * sum).powf(self.beta as f64)
            })
            .collect();
        Ok(vec![Tensor::new(
            out.shape.clone(),
            TensorData::from_f64(out.dtype, y),
        )])
    }

    /// The sum of squares is a reduction over a window of channels, read through
    /// a guard where the window leaves the channel axis.
    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.parts();
        check_arity(self.name(), types, 1)?;
        let shape = extents(&types[0].shape);
        let channels = shape[1];
        let (below, _) = self.window();
        let x = ph[0];
        let sum = g.reduce(
            &format!("S{sfx}"),
            &shape,
            &[self.size as i64],
            ReduceOp::Sum,
            |i, r| {
                let c = i[1].clone() + r[0].clone() - Expr::Int(below as i64);
                let inside = c
                    .clone()
                    .ge(Expr::Int(0))
                    .and(c.clone().lt(Expr::Int(channels)));
                let mut at = i.to_vec();
                at[1] = c.max(Expr::Int(0)).min(Expr::Int(channels - 1));
                let v = x.at(&at);
                Expr::select(inside, v.clone() * v, 0.0)
            },
        )?;
        let (scale, bias, beta) = (
            self.alpha as f64 / self.size as f64,
            self.bias as f64,
            self.beta as f64,
        );
        let y = g.compute(&format!("Y{sfx}"), &shape, |i| {
            let base = sum.at(i) * scale + bias;
            x.at(i) / Expr::call(Intrinsic::Pow, vec![base, Expr::Float(beta)])
        })?;
        Ok(Defined::output(y))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let attrs = vec![
            ("alpha", Attr::Float(self.alpha)),
            ("beta", Attr::Float(self.beta)),
            ("bias", Attr::Float(self.bias)),
            ("size", Attr::Int(self.size as i64)),
        ];
        cx.single("LRN", cx.inputs, attrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{eval1, f32s};

    /// The window of a 3-wide LRN at the edges of 4 channels, by hand.
    #[test]
    fn sums_the_clamped_channel_window() {
        let x = f32s(&[1, 4, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
        let lrn = Lrn {
            alpha: 3.0,
            beta: 1.0,
            bias: 1.0,
            size: 3,
        };
        let y = eval1(Op::Lrn(lrn), &[&x]).to_f32();
        // Channel 0 sums channels 0..=1: 1 + 4 = 5; alpha / size = 1.
        let want = [1.0 / 6.0, 2.0 / 15.0, 3.0 / 30.0, 4.0 / 26.0];
        for (got, want) in y.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{y:?}");
        }
    }
}
