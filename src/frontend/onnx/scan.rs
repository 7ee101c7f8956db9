//! A pass over an ONNX file's wire format before it is decoded: it counts the
//! nodes of the graph and of every subgraph, refusing a node without an op
//! type, subgraphs nested deeper than [`MAX_SUBGRAPH_DEPTH`] and more nodes
//! than the memory budget can hold. The decoder allocates
//! a few hundred bytes for each node, even for an empty one that takes two
//! bytes of the file, so 20 MB of empty nodes would otherwise decode to gigabytes
//! before any check could see them.

use super::MAX_SUBGRAPH_DEPTH;
use protobuf::CodedInputStream;

// Field numbers of onnx.proto.
const MODEL_GRAPH: u32 = 7;
const GRAPH_NODE: u32 = 1;
const NODE_NAME: u32 = 3;
const NODE_OP_TYPE: u32 = 4;
const NODE_ATTRIBUTE: u32 = 5;
const ATTRIBUTE_GRAPH: u32 = 6;
const ATTRIBUTE_GRAPHS: u32 = 11;

const WIRE_VARINT: u32 = 0;
const WIRE_FIXED64: u32 = 1;
const WIRE_LENGTH_DELIMITED: u32 = 2;
const WIRE_FIXED32: u32 = 5;

/// What one node costs from decoding to the run: the decoded `NodeProto` and
/// its strings, the graph node, its plan and its step (a 100k-node Relu chain
/// peaks at 225 MB).
pub const BYTES_PER_NODE: u64 = 2048;

/// Counts every node of the model read from `is` (the caller has pushed the
/// file's length as the limit), refusing a node with an empty op type or with
/// subgraphs nested too deep. Bytes
/// that are not protobuf are left to the decoder, which reads them next: the
/// scan then returns what it counted up to there.
pub fn count_nodes(is: &mut CodedInputStream) -> Result<u64, Refused> {
    let mut scan = Scanner::default();
    let _ = scan.fields(is, &mut |scan, is, field| {
        if field == MODEL_GRAPH {
            scan.graph(is, 0)?;
        }
        Ok(())
    });
    match scan.refused {
        Some(why) => Err(why),
        None => Ok(scan.nodes),
    }
}

/// A node the scan refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A node with an empty op type.
    #[error(
        "not a valid ONNX model: node #{index} ({}) of {} has no op_type",
        quoted(name),
        if *in_subgraph { "a subgraph" } else { "the graph" }
    )]
    NoOpType {
        /// Its index in its graph.
        index: u64,
        /// Its name, if it has one.
        name: Option<String>,
        /// Whether it lies in a subgraph, not the main graph.
        in_subgraph: bool,
    },
    /// A node whose subgraph lies deeper than [`MAX_SUBGRAPH_DEPTH`] levels.
    #[error(
        "node #{index} ({}) holds subgraphs nested deeper than {MAX_SUBGRAPH_DEPTH} levels, the limit",
        quoted(name)
    )]
    TooDeep {
        /// Its index in its graph.
        index: u64,
        /// Its name, if it has one.
        name: Option<String>,
    },
}

fn quoted(name: &Option<String>) -> String {
    name.as_ref()
        .map_or("unnamed".to_string(), |n| format!("'{n}'"))
}

/// Why a scan stopped early: the bytes end or are not protobuf, or a node was
/// refused (then `Scanner::refused` says why).
struct Stop;

impl From<protobuf::Error> for Stop {
    fn from(_: protobuf::Error) -> Stop {
        Stop
    }
}

type Visit<'a> = dyn FnMut(&mut Scanner, &mut CodedInputStream, u32) -> Result<(), Stop> + 'a;

#[derive(Default)]
struct Scanner {
    nodes: u64,
    refused: Option<Refused>,
}

impl Scanner {
    /// Reads fields to the current limit. Each length-delimited one is offered
    /// to `visit` with its length as the limit; what it leaves is skipped.
    fn fields(&mut self, is: &mut CodedInputStream, visit: &mut Visit) -> Result<(), Stop> {
        while let Some(tag) = is.read_raw_tag_or_eof()? {
            match tag & 7 {
                WIRE_VARINT => {
                    is.read_raw_varint64()?;
                }
                WIRE_FIXED64 => skip(is, 8)?,
                WIRE_FIXED32 => skip(is, 4)?,
                WIRE_LENGTH_DELIMITED => {
                    let len = is.read_raw_varint64()?;
                    let outer = is.push_limit(len)?;
                    visit(self, is, tag >> 3)?;
                    skip(is, is.bytes_until_limit())?;
                    is.pop_limit(outer);
                }
                _ => return Err(Stop),
            }
        }
        Ok(())
    }

    fn graph(&mut self, is: &mut CodedInputStream, depth: usize) -> Result<(), Stop> {
        let mut index = 0;
        self.fields(is, &mut |scan, is, field| {
            if field == GRAPH_NODE {
                scan.node(is, depth, index)?;
                index += 1;
            }
            Ok(())
        })
    }

    fn node(&mut self, is: &mut CodedInputStream, depth: usize, index: u64) -> Result<(), Stop> {
        self.nodes += 1;
        let (mut name, mut has_op_type) = (None, false);
        self.fields(is, &mut |scan, is, field| {
            match field {
                NODE_NAME if is.bytes_until_limit() <= MAX_NAME_BYTES => {
                    name = Some(is.read_raw_bytes(is.bytes_until_limit() as u32)?);
                }
                NODE_OP_TYPE => has_op_type |= is.bytes_until_limit() > 0,
                NODE_ATTRIBUTE => scan.fields(is, &mut |scan, is, field| {
                    if field != ATTRIBUTE_GRAPH && field != ATTRIBUTE_GRAPHS {
                        return Ok(());
                    }
                    if depth >= MAX_SUBGRAPH_DEPTH {
                        // The name precedes the attributes in every writer's order.
                        let name = name
                            .as_deref()
                            .map(|n| String::from_utf8_lossy(n).into_owned());
                        scan.refused = Some(Refused::TooDeep {
                            index,
                            name: name.filter(|n| !n.is_empty()),
                        });
                        return Err(Stop);
                    }
                    scan.graph(is, depth + 1)
                })?,
                _ => {}
            }
            Ok(())
        })?;
        if has_op_type {
            return Ok(());
        }
        let name = name.map(|n| String::from_utf8_lossy(&n).into_owned());
        self.refused = Some(Refused::NoOpType {
            index,
            name: name.filter(|n| !n.is_empty()),
            in_subgraph: depth > 0,
        });
        Err(Stop)
    }
}

/// A node name longer than this is not quoted in an error.
const MAX_NAME_BYTES: u64 = 256;

fn skip(is: &mut CodedInputStream, mut len: u64) -> Result<(), Stop> {
    while len > 0 {
        let step = len.min(u32::MAX as u64);
        is.skip_raw_bytes(step as u32)?;
        len -= step;
    }
    Ok(())
}
