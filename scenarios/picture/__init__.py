"""Pictures of a scenario's run: the SVG of who sends which rows where (`picture`), the self-contained HTML
page with its stepper (`page`, what `meshsim draw` writes), the fragment a result shows in a notebook
(`fragment`), and the steps the stepper goes through (`steps`, one per message in time order)."""

from scenarios.picture._page import fragment, page, timeline
from scenarios.picture._steps import order, received_offsets, receiver_slot, slices_per_member, steps
from scenarios.picture._svg import UNSENT, picture, source_spans

__all__ = ["UNSENT", "fragment", "order", "page", "picture", "received_offsets", "receiver_slot", "slices_per_member",
           "source_spans", "steps", "timeline"]
