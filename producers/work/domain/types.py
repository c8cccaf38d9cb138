"""Typing helpers of the work domain: :data:`Conn` is spectral/db/connect.py's."""

from __future__ import annotations

from spectral.db.connect import Conn

__all__ = ["Conn"]
