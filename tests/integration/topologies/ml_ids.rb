# A spout in Ruby on Storm's own adapter (storm.rb, copied beside this file by the shell
# component): emits ids 0..test.count-1 with their id as message id, replays an id when it fails,
# writes mlrbspout-<task>.json (the ids acked, the fails seen) once every id is acked
# (tests/integration/test_multilang.py).
require "json"
require "./storm"

class IdSpout < Storm::Spout
  def open(conf, context)
    @count = Integer(conf["test.count"])
    @out = conf["test.out"]
    @task = context["taskid"]
    @todo = (0...@count).to_a
    @acked = {}
    @failed = 0
    @written = false
    logInfo("ruby spout ready, task #{@task}")
  end

  def nextTuple
    i = @todo.shift
    emit([i], id: i) unless i.nil?
  end

  def ack(id)
    @acked[id] = true
    return unless @acked.size == @count && !@written

    @written = true
    path = File.join(@out, "mlrbspout-#{@task}.json")
    File.write("#{path}.tmp", JSON.generate({"acked" => @acked.keys.sort, "failed" => @failed}))
    File.rename("#{path}.tmp", path)
  end

  def fail(id)
    @failed += 1
    @todo.push(id) unless @acked.key?(id)
  end
end

IdSpout.new.run
