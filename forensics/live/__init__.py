"""Live parts: capturing a running job (`collect`), and watching one (`watch`,
with the coordinator the in-job agent publishes to, `stores`)."""
