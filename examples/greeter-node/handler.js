// Called over HTTP and every five minutes by its cron trigger.
let calls = 0;

exports.handle = async (event) => {
  calls += 1;
  if (event.trigger) {
    console.log(`cron trigger ${event.trigger} at ${event.scheduled_time}`);
  }
  return { greeting: `hi from node (call ${calls})`, method: event._http ? event._http.method : 'cron' };
};
