//! The OpenAI-compatible completions protocol (`POST /v1/completions` with `stream: true`), as
//! vLLM, llama.cpp's server and others serve it: the prompt is the trace's input tokens as
//! token ids, `max_tokens` and `min_tokens` its output tokens with `ignore_eos`, and the stream's
//! server-sent events give each token's arrival and, at the end, the token counts (`usage`).

use bytes::Bytes;
use rand::{RngExt, SeedableRng};

use capsim_sim::record::FailReason;

use crate::EndpointError;
use crate::http::Response;

/// Prompt tokens per trace prefix block (Mooncake's `hash_ids` cover 512 tokens each).
pub const PREFIX_BLOCK_TOKENS: u32 = 512;

/// Checks the answer of `GET /v1/models`: the server is up and serves `model`.
pub fn check_model(response: &Response, url: &str, model: &str) -> Result<(), EndpointError> {
    if response.status != 200 {
        return Err(EndpointError::UnknownModel {
            url: url.to_string(),
            status: response.status,
            body: String::from_utf8_lossy(&response.body)
                .chars()
                .take(300)
                .collect(),
        });
    }
    let listed: serde_json::Value =
        serde_json::from_slice(&response.body).map_err(|e| EndpointError::Protocol {
            url: url.to_string(),
            message: format!("the model list is not JSON ({e})"),
        })?;
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .map(|models| models.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    if !ids.contains(&model) {
        return Err(EndpointError::Protocol {
            url: url.to_string(),
            message: format!(
                "the server does not list model {model:?}; it serves {}",
                if ids.is_empty() {
                    "none".to_string()
                } else {
                    ids.join(", ")
                }
            ),
        });
    }
    Ok(())
}

/// The prompt's token ids: the leading blocks drawn from their prefix ids (so requests that
/// share a prefix in the trace share it here, and the server's prefix cache sees it), the rest
/// from `seed`; every id below `vocab`.
pub fn prompt_ids(input_tokens: u32, prefix_ids: &[u64], vocab: u64, seed: u64) -> Vec<u64> {
    let vocab = vocab.max(2);
    let mut ids = Vec::with_capacity(input_tokens as usize);
    for &block in prefix_ids {
        if ids.len() >= input_tokens as usize {
            break;
        }
        let mut rng = capsim_sim::rng::SimRng::seed_from_u64(block);
        let take = PREFIX_BLOCK_TOKENS.min(input_tokens - ids.len() as u32);
        ids.extend((0..take).map(|_| rng.random_range(1..vocab)));
    }
    let mut rng = capsim_sim::rng::SimRng::seed_from_u64(seed);
    while ids.len() < input_tokens.max(1) as usize {
        ids.push(rng.random_range(1..vocab));
    }
    ids
}

/// The JSON body of a streamed completion of exactly `output_tokens` tokens (at least 1).
pub fn completion_body(
    model: &str,
    input_tokens: u32,
    output_tokens: u32,
    prefix_ids: &[u64],
    vocab: u64,
    seed: u64,
) -> Bytes {
    let tokens = output_tokens.max(1);
    Bytes::from(
        serde_json::json!({
            "model": model,
            "prompt": prompt_ids(input_tokens, prefix_ids, vocab, seed),
            "max_tokens": tokens,
            "min_tokens": tokens,
            "ignore_eos": true,
            "temperature": 0,
            "stream": true,
            "stream_options": { "include_usage": true },
        })
        .to_string(),
    )
}

/// Splits a server-sent event stream into its `data:` events as chunks arrive.
#[derive(Debug, Default)]
pub struct EventSplitter {
    pending: Vec<u8>,
    usage_tokens: Option<u32>,
    done: bool,
    malformed: bool,
}

impl EventSplitter {
    /// Feeds one body chunk; returns how many events in it carried generated text (the tokens
    /// whose arrival it marks). Usage and the closing `[DONE]` are noted.
    pub fn tokens_in(&mut self, chunk: &[u8]) -> usize {
        self.pending.extend_from_slice(chunk);
        let mut tokens = 0;
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                self.done = true;
                continue;
            }
            match serde_json::from_str::<serde_json::Value>(data) {
                Ok(event) => {
                    if let Some(n) = event["usage"]["completion_tokens"].as_u64() {
                        self.usage_tokens = Some(n as u32);
                    }
                    let text = event["choices"][0]["text"].as_str().unwrap_or_default();
                    tokens += usize::from(!text.is_empty());
                }
                Err(_) => self.malformed = true,
            }
        }
        tokens
    }

    /// After the body ended: the completion tokens the server counted (when it said), or a
    /// [`FailReason::Stream`] when the stream was cut (no `[DONE]`) or held an event that is
    /// not JSON.
    pub fn finish(&self) -> Result<Option<u32>, FailReason> {
        if self.malformed || !self.done {
            return Err(FailReason::Stream);
        }
        Ok(self.usage_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_sharing_prefix_blocks_share_their_leading_token_ids() {
        let a = prompt_ids(1_100, &[7, 8, 9], 32_000, 1);
        let b = prompt_ids(1_100, &[7, 8, 10], 32_000, 2);
        assert_eq!(a.len(), 1_100);
        assert_eq!(a[..1_024], b[..1_024], "two shared blocks of 512");
        assert_ne!(a[1_024..], b[1_024..]);
        assert!(a.iter().all(|&id| (1..32_000).contains(&id)));
    }

    #[test]
    fn the_splitter_counts_text_events_across_chunk_boundaries_and_reads_usage() {
        let stream = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choi\
                      ces\":[{\"text\":\"b\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        let mut s = EventSplitter::default();
        let (head, tail) = stream.as_bytes().split_at(40);
        assert_eq!(s.tokens_in(head) + s.tokens_in(tail), 2);
        assert_eq!(s.finish(), Ok(Some(2)));
        let mut cut = EventSplitter::default();
        cut.tokens_in(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
        assert_eq!(
            cut.finish(),
            Err(FailReason::Stream),
            "no [DONE]: the stream was cut"
        );
    }
}
