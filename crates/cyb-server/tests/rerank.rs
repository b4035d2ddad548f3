//! `POST /v1/rerank` over the tiny one-output BERT reranker of tests/fixtures/task_heads
//! (tools/fixtures/make_task_heads_fixture.py, whose reference.json holds transformers'
//! text-classification pipeline scores of text pairs): relevance scores equal the pipeline's
//! sigmoid scores, best first with request indices; `top_n`, `return_documents`; 400s for a
//! classifier with several labels and for missing fields.

mod common;

use common::*;
use cyb_server::ServerConfig;
use serde_json::{json, Value};

#[tokio::test]
async fn rerank_scores_pairs_like_the_pipeline() {
    let s = start(
        vec![
            ("reranker", fixture("task_heads/reranker")),
            ("nli", fixture("nli/bert_nli")),
        ],
        ServerConfig::default(),
    )
    .await;
    let url = s.url("/v1/rerank");
    let path = fixture("task_heads/reranker/reference.json");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // The fixture's pairs, as one query against its own document and the other one.
    let p = r["pairs"].as_array().unwrap();
    let query = p[0]["text"].as_str().unwrap();
    let docs = [
        p[1]["text_pair"].as_str().unwrap(),
        p[0]["text_pair"].as_str().unwrap(),
    ];
    let want = p[0]["labels"][0]["score"].as_f64().unwrap();
    let body = json!({"model": "reranker", "query": query, "documents": docs,
                      "return_documents": true});
    let (st, v) = post(&url, &body).await;
    assert_eq!(st, 200, "{v}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results[0]["relevance_score"].as_f64() >= results[1]["relevance_score"].as_f64());
    let own = results.iter().find(|x| x["index"] == 1).unwrap();
    let got = own["relevance_score"].as_f64().unwrap();
    assert!((got - want).abs() <= 1e-5, "{got} vs transformers {want}");
    assert_eq!(own["document"]["text"], docs[1]);

    let body = json!({"model": "reranker", "query": query, "documents": docs, "top_n": 1});
    let (st, v) = post(&url, &body).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["results"].as_array().unwrap().len(), 1);
    assert!(v["results"][0].get("document").is_none());

    let body = json!({"model": "nli", "query": query, "documents": docs});
    let (st, v) = post(&url, &body).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not a reranker"));
    let (st, _) = post(&url, &json!({"model": "reranker", "query": query})).await;
    assert_eq!(st, 400);
    let body = json!({"model": "reranker", "query": "", "documents": docs});
    let (st, _) = post(&url, &body).await;
    assert_eq!(st, 400);
    s.stop().await;
}
