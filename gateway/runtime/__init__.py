"""The running service: configuration loading, the immutable snapshot and its reload,
tool sources, the services one app uses, and the start-up probe."""
