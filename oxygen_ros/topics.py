"""The node's own topic names, in one table.

Relative names: `~/` resolves under the node (`/oxygen/...`). The node's publishers and
subscriptions use them, and so do the replay and live tools that record the node's
outputs, so the two can never drift apart.
"""

ACTION_CHUNK = "~/action_chunk"
JOINT_TRAJECTORY = "~/joint_trajectory"
STATS = "~/stats"
MARKERS = "~/markers"
DIAGNOSTICS = "/diagnostics"  # absolute: rqt_robot_monitor listens there
REQUEST = "~/request"  # std_msgs/String holding a stream's name: an on-demand request


def stream_tokens(stream: str) -> str:
    """LanguageTokens of one stream, one message per frame per active request."""
    return f"~/{stream}"


def stream_text(stream: str) -> str:
    """std_msgs/String with each finished text of one stream."""
    return f"~/{stream}/text"
