//! The OpenAI-compatible completions protocol (`POST /v1/completions` with `stream: true`), as
//! vLLM, llama.cpp's server and others serve it: the prompt is the trace's input tokens as
//! token ids, `max_tokens` and `min_tokens` its output tokens with `ignore_eos`, and the stream's
//! server-sent events give each token's arrival and, at the end, the token counts (`usage`).
//!
//! Servers differ in what they honour. llama-cpp-python's server (0.3.36) refuses a prompt of
//! token ids (HTTP 500, its request schema takes text only), ignores `ignore_eos` and
//! `stream_options`, and so sends no `usage` in a stream; it does honour `min_tokens`. So a
//! server that refuses ids gets a text prompt of one one-letter word per token
//! ([`PromptForm::Text`]), and without `usage` the completion's length is the number of text
//! events streamed.

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

/// How a server takes a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptForm {
    /// A list of token ids (vLLM, llama.cpp's own server, OpenAI's API): the server sees exactly
    /// the trace's input tokens.
    TokenIds,
    /// Text of one one-letter word per token id (see [`prompt_text`]), for servers that take
    /// text only: its length in tokens is the trace's only where each word is one token, as with
    /// most sentencepiece and byte-level BPE vocabularies, so it is approximate.
    Text,
}

/// The prompt as text: one word a token, the letter `a + id % 26`, separated by spaces
/// ("q d k"), so that prompts sharing leading ids share leading words. Empty for no ids.
pub fn prompt_text(ids: &[u64]) -> String {
    let mut text = String::with_capacity(ids.len() * 2);
    for (i, &id) in ids.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        text.push(char::from(b'a' + (id % 26) as u8));
    }
    text
}

/// The JSON body of a streamed completion of exactly `output_tokens` tokens (at least 1), with
/// the prompt in `form`.
pub fn completion_body(
    model: &str,
    input_tokens: u32,
    output_tokens: u32,
    prefix_ids: &[u64],
    vocab: u64,
    seed: u64,
    form: PromptForm,
) -> Bytes {
    let tokens = output_tokens.max(1);
    let ids = prompt_ids(input_tokens, prefix_ids, vocab, seed);
    let prompt = match form {
        PromptForm::TokenIds => serde_json::json!(ids),
        PromptForm::Text => serde_json::json!(prompt_text(&ids)),
    };
    Bytes::from(
        serde_json::json!({
            "model": model,
            "prompt": prompt,
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
    text_events: u32,
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
        self.text_events += tokens as u32;
        tokens
    }

    /// After the body ended: the completion's tokens, as the server counted them in `usage`
    /// or, when it sent no usage, as the events that carried text (one a token, as servers
    /// stream them; a server that held a token back, say a partial UTF-8 character, and sent it
    /// with the next one is counted one short). A [`FailReason::Stream`] when the stream was
    /// cut (no `[DONE]`) or held an event that is not JSON.
    pub fn finish(&self) -> Result<u32, FailReason> {
        if self.malformed || !self.done {
            return Err(FailReason::Stream);
        }
        Ok(self.usage_tokens.unwrap_or(self.text_events))
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
        assert_eq!(s.finish(), Ok(2));
        let mut cut = EventSplitter::default();
        cut.tokens_in(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
        assert_eq!(
            cut.finish(),
            Err(FailReason::Stream),
            "no [DONE]: the stream was cut"
        );
    }

    #[test]
    fn without_usage_the_length_is_the_text_events_streamed() {
        // As llama-cpp-python streams: a text event a token, a closing event with no text, no
        // usage (it ignores stream_options).
        let stream = "data: {\"choices\":[{\"text\":\" w1\"}]}\n\ndata: {\"choices\":[{\"text\":\" w2\"}]}\n\n\
                      data: {\"choices\":[{\"text\":\" w3\"}]}\n\ndata: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n\
                      data: [DONE]\n\n";
        let mut s = EventSplitter::default();
        assert_eq!(s.tokens_in(stream.as_bytes()), 3);
        assert_eq!(
            s.finish(),
            Ok(3),
            "not the trace's length: what was streamed"
        );
    }

    #[test]
    fn a_text_prompt_has_one_word_a_token_and_keeps_shared_prefixes() {
        assert_eq!(prompt_text(&[0, 1, 27, 25]), "a b b z");
        assert_eq!(prompt_text(&[]), "");
        let a = prompt_ids(600, &[7], 512, 1);
        let b = prompt_ids(600, &[7], 512, 2);
        let (ta, tb) = (prompt_text(&a), prompt_text(&b));
        assert_eq!(ta.split(' ').count(), 600);
        assert_eq!(ta[..2 * 512], tb[..2 * 512], "the shared block's words");
        let body: serde_json::Value =
            serde_json::from_slice(&completion_body("m", 3, 2, &[], 512, 0, PromptForm::Text))
                .expect("JSON");
        assert_eq!(
            body["prompt"].as_str().map(|p| p.split(' ').count()),
            Some(3)
        );
        assert_eq!(
            (&body["max_tokens"], &body["min_tokens"]),
            (&2.into(), &2.into())
        );
    }
}
