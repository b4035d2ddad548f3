//! Dispatcher behaviour: preferred backend first, fallback to the reference, records kept.

use cyb_backend::{create_backend, Backend, Dispatcher, ExecContext, ReferenceBackend};
use cyb_ops::Op;
use cyb_tensor::{DType, Error, Result, Tensor, TensorInfo};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A host backend that only knows `relu`, and executes it by negating the reference's answer so
/// the test can tell who ran it.
#[derive(Default)]
struct ReluOnly {
    calls: AtomicUsize,
}

impl Backend for ReluOnly {
    fn name(&self) -> &str {
        "relu-only"
    }
    fn supports(&self, op: &Op, _inputs: &[TensorInfo]) -> bool {
        matches!(op, Op::Relu)
    }
    fn host_memory(&self) -> bool {
        true
    }
    fn execute(&self, op: &Op, inputs: &[Tensor], ctx: &mut ExecContext) -> Result<Vec<Tensor>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let out = ReferenceBackend.execute(op, inputs, ctx)?;
        let v: Vec<f32> = out[0].to_f32_vec()?.iter().map(|x| -x).collect();
        Ok(vec![Tensor::from_f32(out[0].dims(), &v)?])
    }
    fn alloc(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::zeros(shape, dtype)
    }
    fn upload(&self, data: &[u8], shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::from_bytes(shape, dtype, data)
    }
    fn download_f32(&self, t: &Tensor) -> Result<Vec<f32>> {
        t.to_f32_vec()
    }
    fn download(&self, t: &Tensor) -> Result<Tensor> {
        Ok(t.clone())
    }
}

#[test]
fn falls_back_to_reference_and_records_it() {
    let relu = Arc::new(ReluOnly::default());
    let d = Dispatcher::new(vec![relu.clone()]);
    assert_eq!(d.chain().len(), 2);
    assert_eq!(d.chain()[1].name(), "reference");

    let x = Tensor::from_f32(&[3], &[-1.0, 2.0, -3.0]).unwrap();
    let r = d.run(&Op::Relu, std::slice::from_ref(&x)).unwrap();
    assert_eq!(r[0].to_f32_vec().unwrap(), vec![-0.0, -2.0, -0.0]);
    assert_eq!(relu.calls.load(Ordering::SeqCst), 1);

    let s = d.run(&Op::Scale { factor: 2.0 }, &[x]).unwrap();
    assert_eq!(s[0].to_f32_vec().unwrap(), vec![-2.0, 4.0, -6.0]);

    let log = d.log();
    assert_eq!(log.executed[&("relu".into(), "relu-only".into())], 1);
    assert_eq!(log.executed[&("scale".into(), "reference".into())], 1);
    assert_eq!(log.first_fallbacks.len(), 1);
    assert_eq!(log.first_fallbacks[0].from, "relu-only");
    assert!(log
        .summary()
        .contains("fallback scale relu-only -> reference"));
}

#[test]
fn reference_errors_are_final_and_structured() {
    let d = Dispatcher::reference();
    let a = Tensor::from_f32(&[2, 3], &[0.0; 6]).unwrap();
    let b = Tensor::from_f32(&[4, 5], &[0.0; 20]).unwrap();
    let err = d
        .run(
            &Op::MatMul {
                rhs_transposed: true,
            },
            &[a, b],
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ShapeMismatch { .. } | Error::InvalidArgument { .. }
        ),
        "{err:?}"
    );
}

#[test]
fn unknown_and_unbuilt_backends_say_why() {
    for name in ["honeycrisp", "nox", "cuda", "bogus"] {
        match create_backend(name) {
            Err(Error::BackendInit { backend, reason }) => {
                assert_eq!(backend, name);
                assert!(!reason.is_empty());
            }
            Err(e) => panic!("{name}: unexpected error {e}"),
            Ok(_) => panic!("{name}: should not be available"),
        }
    }
    assert_eq!(create_backend("reference").unwrap().name(), "reference");
}
