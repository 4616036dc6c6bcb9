const executeTool = async () => {
  const partial = []

  AssistantTool.onCancel = () => {
    return formatPartialResult(partial)
  }

  for (const item of items) {
    if (AssistantTool.isCancelled) break
    const r = await process(item)
    partial.push(r)
  }

  if (AssistantTool.isCancelled) {
    return
  }

  return {
    success: true,
    message: formatFinalResult(partial)
  }
}
