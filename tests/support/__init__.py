"""What tests share: object builders (``policies``, ``accesspolicies``, ``fleets``) and
waiting on conditions (``waiting``). Tests import from here, never from one another's
modules."""
