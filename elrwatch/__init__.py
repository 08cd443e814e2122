"""elrwatch: real-time ISR / ELR safety monitor for Kafka (KRaft)."""
