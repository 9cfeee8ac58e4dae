"""The model servers: the client (retries, keys, error mapping), the chat-completions
dialect (wire dicts to the engine's values and back) and server-sent events."""
