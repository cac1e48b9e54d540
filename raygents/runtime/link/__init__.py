"""What crosses between the driver and the actors: the coordinator client, mailboxes, wire
formats."""
