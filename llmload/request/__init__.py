"""One request's path: payload, SSE decoding, chunks, the stream, failures, tokens and the RequestRecord."""
