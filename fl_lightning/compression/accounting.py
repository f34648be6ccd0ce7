"""The round's message and aggregation types live in ``fl_lightning.federation.messages``; re-exported here,
where existing code imports them."""
from fl_lightning.federation.messages import CommMeter, Message, Part, Payload, ReceivedSums

__all__ = ["CommMeter", "Message", "Part", "Payload", "ReceivedSums"]
