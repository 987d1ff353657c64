"""Texts of scheduled jobs a chat user reads: the /jobs command, its listing, the notice of a prompt job that failed."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "jobs.help": {
        "zh-CN": "列出本会话的定时任务；/jobs delete ID 删除其中一个",
        "en": "list this chat's scheduled jobs; /jobs delete ID removes one",
    },
    "jobs.usage": {
        "zh-CN": "用法：/jobs 列出本会话的定时任务；/jobs delete ID 删除其中一个。",
        "en": "Usage: /jobs lists this chat's scheduled jobs; /jobs delete ID removes one.",
    },
    "jobs.disabled": {"zh-CN": "定时任务功能已关闭。", "en": "Scheduled jobs are turned off."},
    "jobs.none": {
        "zh-CN": "本会话还没有定时任务。想设置提醒，直接告诉我即可，例如“明天上午九点提醒我交周报”。",
        "en": (
            "This chat has no scheduled jobs. To set one, just ask me, e.g. "
            '"remind me at 9 tomorrow to send the report".'
        ),
    },
    "jobs.list_header": {"zh-CN": "本会话的定时任务（{count} 个）：", "en": "Scheduled jobs of this chat ({count}):"},
    "jobs.list_footer": {"zh-CN": "删除任务：/jobs delete ID", "en": "To remove one: /jobs delete ID"},
    "jobs.item_once": {"zh-CN": "{job_id}  一次性，{when}", "en": "{job_id}  once, {when}"},
    "jobs.item_cron": {
        "zh-CN": "{job_id}  周期（cron {cron}），下次 {when}",
        "en": "{job_id}  recurring (cron {cron}), next {when}",
    },
    "jobs.item_done": {"zh-CN": "{job_id}  已完成", "en": "{job_id}  done"},
    "jobs.item_text": {"zh-CN": "提醒：{content}", "en": "text: {content}"},
    "jobs.item_prompt": {"zh-CN": "指令：{content}", "en": "prompt: {content}"},
    "jobs.deleted": {"zh-CN": "已删除定时任务 {job_id}。", "en": "Deleted job {job_id}."},
    "jobs.not_found": {
        "zh-CN": "本会话没有编号为 {job_id} 的定时任务（发送 /jobs 查看）。",
        "en": "This chat has no job {job_id} (send /jobs to see them).",
    },
    "jobs.date": {"zh-CN": "{month}{day}日 {hm}", "en": "{month} {day} {hm}"},
    "jobs.date_year": {"zh-CN": "{year}年{month}{day}日 {hm}", "en": "{month} {day}, {year} {hm}"},
    "jobs.date_zone": {"zh-CN": "{when}（{zone}）", "en": "{when} ({zone})"},
    "jobs.prompt_failed_once": {
        "zh-CN": "定时任务 {job_id} 这次没能完成。如果仍然需要，请让我重新安排。",
        "en": (
            "Scheduled job {job_id} could not be completed this time. Ask me to schedule it again if you still need it."
        ),
    },
    "jobs.prompt_failed_recurring": {
        "zh-CN": "定时任务 {job_id} 这次没能完成，下次将在 {when} 照常运行。",
        "en": "Scheduled job {job_id} could not be completed this time; it runs again as planned at {when}.",
    },
}
TEXTS |= {
    f"jobs.month_{number}": {"zh-CN": f"{number}月", "en": name}
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
"""Month names of `jobs.date`: `12月` / `Dec`."""
