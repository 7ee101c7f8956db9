//! Materialisation: an assignment spelled out as a graph, each op placed in
//! its chosen layouts, with the transforms (and padding refills) between them,
//! each shared by every consumer wanting the same layout.

use super::candidates::{Impl, LayoutId, Layouts};
use super::cost::CostModel;
use super::relabel::{relabelled, relabelled_back};
use super::space::PlanSpace;
use super::PlanError;
use super::{pad_flow, Layout, PadValue, Requirement};
use crate::graph::{
    fold_node, merge_spans, Graph, GraphError, LaidOut, NodeId, Op, Span, ValueRef, ValueType,
};
use crate::ops::LayoutTransform;
use std::collections::HashMap;

/// What the cost model charges for the transforms of a planned graph.
pub(super) fn transforms_cost(g: &Graph, model: &CostModel) -> f64 {
    g.node_ids()
        .into_iter()
        .filter_map(|id| {
            let n = g.node(id);
            let Op::LayoutTransform(t) = &n.op else {
                return None;
            };
            let ty = ValueType::new(n.outputs[0].ty.dtype, t.logical.clone());
            Some(model.transform_cost(&ty, &t.from, &t.to))
        })
        .sum()
}

/// An assignment spelled out as a graph, before rewriting.
pub(super) struct Materialised {
    pub(super) choice: Vec<usize>,
    pub(super) graph: Graph,
    pub(super) packed_constants: usize,
    pub(super) refills: usize,
    /// What its transforms cost in the model.
    pub(super) transforms_cost: f64,
    /// The assignment's cost in the solver's problem.
    pub(super) cost: f64,
}

pub(super) fn materialise(
    g: &Graph,
    space: &PlanSpace,
    choice: Vec<usize>,
    model: &CostModel,
) -> Result<Materialised, PlanError> {
    let mut m = Materializer::new(g, &space.layouts);
    m.run(space, &choice)?;
    Ok(Materialised {
        cost: space.problem.cost(&choice),
        transforms_cost: transforms_cost(&m.out, model),
        choice,
        packed_constants: m.packed_constants,
        refills: m.refills,
        graph: m.out,
    })
}

/// Where a source value lives in the planned graph.
#[derive(Clone, Copy)]
struct Placed {
    value: ValueRef,
    layout: LayoutId,
    pad: PadValue,
}

struct Materializer<'a> {
    src: &'a Graph,
    layouts: &'a Layouts,
    out: Graph,
    placed: HashMap<ValueRef, Placed>,
    /// Transforms already made, shared by every consumer wanting that layout.
    converted: HashMap<(ValueRef, LayoutId, Option<u32>), (ValueRef, PadValue)>,
    packed_constants: usize,
    refills: usize,
}

impl<'a> Materializer<'a> {
    fn new(src: &'a Graph, layouts: &'a Layouts) -> Materializer<'a> {
        Materializer {
            src,
            layouts,
            out: src.empty_like(),
            placed: HashMap::new(),
            converted: HashMap::new(),
            packed_constants: 0,
            refills: 0,
        }
    }

    fn layout(&self, id: LayoutId) -> &'a Layout {
        self.layouts.get(id)
    }

    /// The row-major layout of `v` (interned while the plan space was built).
    fn row_major(&self, v: ValueRef) -> Result<LayoutId, PlanError> {
        let rank = self.src.value_type(v).shape.len();
        self.layouts.identity_id(rank).ok_or_else(|| {
            PlanError::Graph(GraphError::Graph(format!(
                "no row-major layout of rank {rank}"
            )))
        })
    }

    fn run(&mut self, space: &PlanSpace, choice: &[usize]) -> Result<(), PlanError> {
        let chosen: HashMap<NodeId, &Impl> = space
            .nodes
            .iter()
            .zip(choice)
            .enumerate()
            .map(|(var, (&id, &k))| (id, space.impl_of(var, k)))
            .collect();
        for id in self.src.topo_order()? {
            let node = self.src.node(id);
            match &node.op {
                Op::Input => {
                    // A pinned input arrives stored in its layout.
                    let src = ValueRef::new(id, 0);
                    let layout = space.interface[&src];
                    let ty = &node.outputs[0].ty;
                    let physical = self.layout(layout).physical_shape(&ty.shape)?;
                    let v = self.out.add_input(
                        &node.name,
                        ValueType::new(ty.dtype, physical),
                        node.spans.clone(),
                    );
                    self.place(src, v, layout);
                }
                Op::Constant(t) => {
                    let v = self
                        .out
                        .add_constant(&node.name, t.clone(), node.spans.clone());
                    let src = ValueRef::new(id, 0);
                    let row_major = self.row_major(src)?;
                    self.place(src, v, row_major);
                }
                op => self.place_op(id, op, chosen[&id])?,
            }
        }
        let mut outputs = Vec::new();
        for &v in self.src.outputs() {
            outputs.push(self.get(v, space.interface[&v], None, &[])?);
        }
        self.out.set_outputs(outputs);
        Ok(())
    }

    /// Records that the source value `src` is `v`, stored in `layout`.
    fn place(&mut self, src: ValueRef, v: ValueRef, layout: LayoutId) {
        self.placed.insert(
            src,
            Placed {
                value: v,
                layout,
                pad: PadValue::Undef,
            },
        );
    }

    fn place_op(&mut self, id: NodeId, op: &Op, imp: &Impl) -> Result<(), PlanError> {
        let node = self.src.node(id);
        let src_inputs = self.src.node_inputs(id);
        let row_major = imp
            .inputs
            .iter()
            .chain(&imp.outputs)
            .all(|&l| self.layout(l).is_identity());
        let refills = if row_major {
            vec![None; src_inputs.len()]
        } else {
            match self.refills(op, &src_inputs, imp)? {
                Some(refills) => refills,
                // The op cannot run in the planned layouts (it needs something
                // in the padding no transform can write): it runs row-major
                // instead, with transforms around it.
                None => return self.place_op(id, op, &self.row_major_impl(id)?),
            }
        };
        let mut inputs = Vec::with_capacity(src_inputs.len());
        for (j, &v) in src_inputs.iter().enumerate() {
            inputs.push(self.get(v, imp.inputs[j], refills[j], &node.spans)?);
        }
        self.refills += refills.iter().flatten().count();
        let names: Vec<String> = node.outputs.iter().map(|v| v.name.clone()).collect();
        let new_op = if row_major {
            op.clone()
        } else {
            let x_shape = &self.src.value_type(src_inputs[0]).shape;
            let padded = self.layout(imp.inputs[0]).padded_axes(x_shape)?;
            // What the padding holds once refilled.
            let pads: Vec<PadValue> = src_inputs
                .iter()
                .zip(&imp.inputs)
                .zip(&refills)
                .map(|((v, &w), refill)| match refill {
                    Some(fill) => PadValue::Known(*fill),
                    None => self.pad_of(*v, w),
                })
                .collect();
            let out_pad = pad_flow(op, &pads, &padded).output;
            Op::InLayout(Box::new(LaidOut {
                inner: op.clone(),
                inputs: src_inputs
                    .iter()
                    .zip(&imp.inputs)
                    .map(|(v, &l)| {
                        (
                            self.layout(l).clone(),
                            self.src.value_type(*v).shape.clone(),
                        )
                    })
                    .collect(),
                outputs: imp
                    .outputs
                    .iter()
                    .map(|&l| (self.layout(l).clone(), out_pad))
                    .collect(),
            }))
        };
        let new_id = self
            .out
            .add_node(new_op, &node.name, &inputs, &names, node.spans.clone())?;
        for (i, &layout) in imp.outputs.iter().enumerate() {
            let pad = match &self.out.node(new_id).op {
                Op::InLayout(lo) => lo.outputs[i].1,
                _ => PadValue::Undef,
            };
            self.placed.insert(
                ValueRef::new(id, i),
                Placed {
                    value: ValueRef::new(new_id, i),
                    layout,
                    pad,
                },
            );
        }
        Ok(())
    }

    /// The value each input's padding must be rewritten with for `op` to run in
    /// `imp` (`None` where it already holds what the op needs), or `None` when
    /// the op needs something no transform writes there.
    #[allow(clippy::type_complexity)]
    fn refills(
        &self,
        op: &Op,
        src_inputs: &[ValueRef],
        imp: &Impl,
    ) -> Result<Option<Vec<Option<f32>>>, PlanError> {
        let pads: Vec<PadValue> = src_inputs
            .iter()
            .zip(&imp.inputs)
            .map(|(v, &want)| self.pad_of(*v, want))
            .collect();
        let x_shape = &self.src.value_type(src_inputs[0]).shape;
        let padded = self.layout(imp.inputs[0]).padded_axes(x_shape)?;
        let flow = pad_flow(op, &pads, &padded);
        let mut refills = Vec::with_capacity(src_inputs.len());
        for (j, req) in flow.inputs.iter().enumerate() {
            let shape = &self.src.value_type(src_inputs[j]).shape;
            if req.is_met_by(pads[j]) || self.layout(imp.inputs[j]).padded_axes(shape)?.is_empty() {
                refills.push(None);
                continue;
            }
            refills.push(Some(match req {
                Requirement::Value(v) => *v,
                Requirement::Finite => 0.0,
                _ => return Ok(None),
            }));
        }
        refills.resize(src_inputs.len(), None);
        Ok(Some(refills))
    }

    /// Node `id` with every input and output row-major.
    fn row_major_impl(&self, id: NodeId) -> Result<Impl, PlanError> {
        let node = self.src.node(id);
        let inputs = self.src.node_inputs(id);
        let outputs = (0..node.outputs.len()).map(|i| ValueRef::new(id, i));
        Ok(Impl {
            inputs: inputs
                .iter()
                .map(|&v| self.row_major(v))
                .collect::<Result<_, _>>()?,
            outputs: outputs
                .map(|v| self.row_major(v))
                .collect::<Result<_, _>>()?,
            cost: 0.0,
        })
    }

    /// The padding `v` holds once in layout `want`: what the transform made for
    /// it wrote, or what its producer left.
    fn pad_of(&self, v: ValueRef, want: LayoutId) -> PadValue {
        // Constants are packed at compile time with zeros in any padding.
        if self.src.constant(v).is_some() {
            return PadValue::Known(0.0);
        }
        if let Some((_, pad)) = self.converted.get(&(v, want, None)) {
            return *pad;
        }
        let p = &self.placed[&v];
        if p.layout == want {
            p.pad
        } else {
            PadValue::Known(0.0)
        }
    }

    /// `v` in layout `want` when `v` is a relabelling (a transpose or reshape
    /// that kept its input's bytes) of `x`: `x` in the layout that relabels to
    /// `want`, relabelled again. The transform then happens on `x`, shared with
    /// every other reader of `x` or of another relabelling of it that wants
    /// the same bytes, instead of once per relabelled copy.
    fn through_relabel(
        &mut self,
        v: ValueRef,
        want: LayoutId,
        consumer: &[Span],
    ) -> Result<Option<ValueRef>, PlanError> {
        let op = &self.src.node(v.node).op;
        let [x] = self.src.node_inputs(v.node)[..] else {
            return Ok(None);
        };
        if self.src.constant(x).is_some() {
            return Ok(None);
        }
        let (x_shape, v_shape) = (&self.src.value_type(x).shape, &self.src.value_type(v).shape);
        let (px, pv) = (self.placed[&x], self.placed[&v]);
        let ran_as_relabel = relabelled(op, self.layout(px.layout), x_shape).as_ref()
            == Some(self.layout(pv.layout));
        let to = self.layout(want);
        let back = relabelled_back(op, to, x_shape, v_shape)
            .filter(|b| relabelled(op, b, x_shape).as_ref() == Some(to))
            .and_then(|b| self.layouts.find(&b));
        let (true, Some(back)) = (ran_as_relabel, back) else {
            return Ok(None);
        };
        let xv = self.get(x, back, None, consumer)?;
        let pad = self.pad_of(x, back);
        let node = self.src.node(v.node);
        let name = format!("{}@{}", node.outputs[v.output].name, to);
        let relabel = Op::InLayout(Box::new(LaidOut {
            inner: op.clone(),
            inputs: vec![(self.layout(back).clone(), x_shape.clone())],
            outputs: vec![(to.clone(), pad)],
        }));
        let spans = merge_spans([node.spans.as_slice(), consumer]);
        let id = self
            .out
            .add_node(relabel, &name, &[xv], std::slice::from_ref(&name), spans)?;
        let result = ValueRef::new(id, 0);
        self.converted.insert((v, want, None), (result, pad));
        Ok(Some(result))
    }

    /// `v` in layout `want`, inserting (or reusing) a transform; `refill` forces a
    /// transform that rewrites the padding with that value.
    fn get(
        &mut self,
        v: ValueRef,
        want: LayoutId,
        refill: Option<f32>,
        consumer: &[Span],
    ) -> Result<ValueRef, PlanError> {
        let p = self.placed[&v];
        if p.layout == want && refill.is_none() {
            return Ok(p.value);
        }
        let key = (v, want, refill.map(f32::to_bits));
        if let Some(&(done, _)) = self.converted.get(&key) {
            return Ok(done);
        }
        if refill.is_none() {
            if let Some(shared) = self.through_relabel(v, want, consumer)? {
                return Ok(shared);
            }
        }
        let (from, to) = (self.layout(p.layout), self.layout(want));
        let ty = self.src.value_type(v).clone();
        let pad = PadValue::Known(refill.unwrap_or(0.0));
        let producer = self.src.node(v.node);
        let spans = merge_spans([producer.spans.as_slice(), consumer]);
        let name = format!("{}@{}", producer.outputs[v.output].name, to);
        let op = Op::LayoutTransform(LayoutTransform {
            from: from.clone(),
            to: to.clone(),
            logical: ty.shape.clone(),
            pad,
        });
        let id = self
            .out
            .add_node(op, &name, &[p.value], std::slice::from_ref(&name), spans)?;
        let result = if let Some(consts) = fold_node(&mut self.out, id)? {
            self.packed_constants += 1;
            consts[0]
        } else {
            ValueRef::new(id, 0)
        };
        self.converted.insert(key, (result, pad));
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, Tensor};
    use crate::layout::report::kept_transforms;
    use crate::layout::solver::{self, SolveOptions};
    use crate::layout::target::TargetFamily;
    use crate::ops::testutil::conv_3x3;

    /// An input read by two convolutions that both run blocked: the
    /// materialiser makes one transform for both, and the problem charges it
    /// once (a variant of the input pays it), not once per reader.
    #[test]
    fn a_transform_shared_by_two_readers_is_charged_once() {
        let mut g = Graph::new("fan-out");
        let ty = ValueType::new(DType::F32, vec![1, 32, 8, 8]);
        let x = g.add_input("x", ty, vec![]);
        let mut outs = Vec::new();
        for name in ["a", "b"] {
            let w = g.add_constant(
                &format!("{name}_w"),
                Tensor::from_f32(vec![32, 32, 3, 3], vec![0.01; 32 * 32 * 9]),
                vec![],
            );
            let id = g
                .add_node(conv_3x3(), name, &[x, w], &[name.to_string()], vec![])
                .unwrap();
            outs.push(ValueRef::new(id, 0));
        }
        g.set_outputs(outs);
        let model = CostModel::default();
        let space = PlanSpace::build(&g, TargetFamily::Nchwc(16), &model).unwrap();
        let choice = solver::solve(&space.problem, &SolveOptions::default())
            .unwrap()
            .choice;
        let ops: f64 = (0..choice.len())
            .map(|var| space.impl_of(var, choice[var]).cost)
            .sum();
        let m = materialise(&g, &space, choice.clone(), &model).unwrap();
        let transforms = kept_transforms(&m.graph);
        let into_blocked = transforms.iter().filter(|t| t.value == "x").count();
        assert_eq!(into_blocked, 1, "{transforms:?}");
        let charged = space.problem.cost(&choice) - ops;
        assert!(
            (charged - m.transforms_cost).abs() <= 1e-6 * charged.abs(),
            "the problem charged {charged} ns for transforms costing {} ns",
            m.transforms_cost
        );
    }

    /// A blocked conv whose relu feeds a row-major graph output: the
    /// transform back to NCHW goes after the relu, which then runs in the
    /// conv's epilogue, not between them (both move the same bytes, but the
    /// relu would be a pass of its own).
    #[test]
    fn a_transform_goes_after_the_activation_a_conv_fuses() {
        let mut g = Graph::new("conv-relu");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![1, 32, 8, 8]), vec![]);
        let w = g.add_constant(
            "w",
            Tensor::from_f32(vec![32, 32, 3, 3], vec![0.01; 32 * 32 * 9]),
            vec![],
        );
        let conv = g
            .add_node(conv_3x3(), "conv", &[x, w], &["conv".to_string()], vec![])
            .unwrap();
        let relu = g
            .add_node(
                Op::Unary(crate::ops::UnaryOp::Relu),
                "relu",
                &[ValueRef::new(conv, 0)],
                &["relu".to_string()],
                vec![],
            )
            .unwrap();
        g.set_outputs(vec![ValueRef::new(relu, 0)]);
        let model = CostModel::default();
        let space = PlanSpace::build(&g, TargetFamily::Nchwc(16), &model).unwrap();
        let choice = solver::solve(&space.problem, &SolveOptions::default())
            .unwrap()
            .choice;
        let m = materialise(&g, &space, choice, &model).unwrap();
        let transformed: Vec<String> = kept_transforms(&m.graph)
            .into_iter()
            .map(|t| t.value)
            .collect();
        assert_eq!(transformed, ["x", "relu"]);
    }
}
