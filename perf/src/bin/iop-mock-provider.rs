//! `iop-mock-provider`: a fast OpenAI/Ollama-compatible model server stand-in.

fn main() {}
