"""Adapters: the AWS implementations of the ports, and their in-memory fakes."""

from __future__ import annotations
