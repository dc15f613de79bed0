"""Task registry: each task family registers a ``Task`` by name; heavy modules import on first use."""

from r1vision.tasks.base import EvalResult, RewardSpec, Task
from r1vision.tasks.options import TaskOptionError
from r1vision.tasks.registry import (
    get_task,
    list_rewards,
    list_tasks,
    register_reward,
    register_task,
    resolve_rewards,
    task_class,
)

register_task("color", "r1vision.tasks.color.task:ColorTask")
register_task("motion", "r1vision.tasks.motion.task:MotionTask")
register_task("sgg", "r1vision.tasks.sgg.task:SGGTask")
register_task("sgg_psg", "r1vision.tasks.sgg.task:PSGTask")
register_task("geometry", "r1vision.tasks.geometry.task:GeometryTask")
register_task("svg", "r1vision.tasks.svg.task:SVGTask")

__all__ = [
    "EvalResult",
    "RewardSpec",
    "Task",
    "TaskOptionError",
    "get_task",
    "list_rewards",
    "list_tasks",
    "register_reward",
    "register_task",
    "resolve_rewards",
    "task_class",
]
