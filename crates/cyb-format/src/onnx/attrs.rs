//! Typed access to a node's attributes, with ONNX's defaults supplied by the caller.

use super::proto::{AttributeProto, GraphProto, TensorProto};

pub(crate) struct Attrs<'a> {
    list: &'a [AttributeProto],
}

impl<'a> Attrs<'a> {
    pub fn new(list: &'a [AttributeProto]) -> Attrs<'a> {
        Attrs { list }
    }

    fn get(&self, name: &str) -> Option<&'a AttributeProto> {
        self.list.iter().find(|a| a.name == name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn i(&self, name: &str, default: i64) -> i64 {
        self.get(name).map_or(default, |a| a.i)
    }

    pub fn f(&self, name: &str, default: f32) -> f32 {
        self.get(name).map_or(default, |a| a.f)
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name).map(|a| a.ints.clone())
    }

    pub fn floats(&self, name: &str) -> Option<Vec<f32>> {
        self.get(name).map(|a| a.floats.clone())
    }

    pub fn s(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(|a| String::from_utf8_lossy(&a.s).into_owned())
    }

    pub fn strings(&self, name: &str) -> Option<Vec<String>> {
        self.get(name).map(|a| {
            a.strings
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect()
        })
    }

    pub fn g(&self, name: &str) -> Option<&'a GraphProto> {
        self.get(name).and_then(|a| a.g.as_deref())
    }

    pub fn t(&self, name: &str) -> Option<&'a TensorProto> {
        self.get(name).and_then(|a| a.t.as_ref())
    }

    pub fn names(&self) -> impl Iterator<Item = &'a str> {
        self.list.iter().map(|a| a.name.as_str())
    }
}
