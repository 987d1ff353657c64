"""Process hosting: the composition root (`app`), `agenthub serve` (`daemon`), the data-dir lock, sd_notify, and the
client `agenthub chat` uses to reach a running daemon (`remote`)."""
